//! The command line. `run --config FILE` runs whatever the file describes;
//! `serve` and `proxy` are shortcuts for a one-site file: their flags fill
//! the same keys a config file has (same names: `--keepalive-timeout` is
//! `[timeouts] keepalive`, `--backend` is `backend`), and one resolver
//! (`config::settings`) turns the result into the settings both services
//! read.

use crate::config::file::{FileConfig, OneOrMany, ProxyVersion};
use crate::config::settings::{self, Origins};
use crate::config::{ConfigError, KtlsMode, Settings};
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};

/// `tlsfront --version`: the package version, then what it was built from
/// (build.rs: the commit when built from a git checkout, the rustls
/// release and its crypto provider).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("TLSFRONT_BUILD_DETAILS"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "tlsfront",
    version = VERSION,
    about = "A TLS front end for Linux: static files over HTTPS and TLS termination for TCP \
             backends, with kernel TLS + sendfile/splice"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the sites a config file describes (static files and backends on
    /// the same listeners, chosen by the name the client asks for).
    Run(Box<RunArgs>),
    /// Serve a directory over HTTPS (HTTP/1.1): one site, from flags.
    Serve(Box<ServeArgs>),
    /// Terminate TLS for a plain-TCP backend (like hitch or stud): one
    /// site, from flags.
    Proxy(Box<ProxyArgs>),
    /// Check a config file (nginx -t, hitch --test).
    #[command(subcommand)]
    Config(ConfigCommand),
    /// ACME certificates of the sites with `acme = true`.
    #[command(subcommand)]
    Acme(AcmeCommand),
    /// Show what this kernel's TLS offload can do, and how to fix each "no".
    Check,
    /// The man pages and shell completions, made from this command line's
    /// own definition (for packagers: dist/man and dist/completions are
    /// its output).
    #[command(subcommand, hide = true)]
    Generate(GenerateCommand),
}

#[derive(Subcommand, Debug)]
pub enum GenerateCommand {
    /// Write tlsfront.1 and a page per subcommand (tlsfront-run.1, ...)
    /// into DIR.
    Man {
        /// The directory to write to.
        dir: PathBuf,
    },
    /// Print the completion script for SHELL.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// The command line's definition as the generated documents show it: the
/// plain package version (no commit, so that the pages in dist/ change
/// only when the command line does).
fn documented_command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().version(env!("CARGO_PKG_VERSION"))
}

/// The man pages: `(file name, roff text)` for tlsfront.1 and one page per
/// visible subcommand, nested ones too (tlsfront-config-check.1).
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    // As `clap_mangen::generate_to`, in memory: after `build`, each
    // subcommand is named `tlsfront-run` for its page and `tlsfront run`
    // in its synopsis.
    fn walk(cmd: &clap::Command, out: &mut Vec<(String, Vec<u8>)>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, out);
        }
        let man = clap_mangen::Man::new(cmd.clone());
        let mut page = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = man.render(&mut page);
        out.push((man.get_filename(), page));
    }
    let mut cmd = documented_command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    walk(&cmd, &mut out);
    out.sort();
    out
}

/// The completion script of `shell`.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = documented_command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "tlsfront", &mut out);
    out
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Parse FILE, load every certificate and key, check that keys match
    /// and names are covered, warn about certificates near expiry, and
    /// print the resolved sites. Exits 0 if tlsfront would start with it.
    Check {
        /// The config file.
        file: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum AcmeCommand {
    /// Revoke the stored certificate of the site with NAME (a key that may
    /// have leaked) and remove it: at the next reload (SIGHUP, `systemctl
    /// reload tlsfront`) the site serves a placeholder and gets a new one.
    Revoke {
        /// The config file the server runs with.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// A name of the site.
        name: String,
    },
}

/// Process-wide settings every command that listens takes.
#[derive(Args, Debug, Default)]
pub struct GlobalArgs {
    /// Address to listen on, IPv4 or IPv6 (repeatable) [default: the config
    /// file's listen, else 127.0.0.1:8443].
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<String>,
    /// Plain-HTTP address (repeatable) that redirects to HTTPS and answers
    /// ACME HTTP-01, e.g. 0.0.0.0:80 [default: the config file's
    /// http_listen, else none].
    #[arg(long, value_name = "ADDR")]
    pub http_listen: Vec<String>,
    /// Plain-HTTP admin address for /metrics (Prometheus) and /healthz,
    /// e.g. 127.0.0.1:9101 [default: none].
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
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
    /// Expect a PROXY v1/v2 header from a load balancer in front, and pass
    /// its client address on. Only from --proxy-from sources.
    #[arg(long)]
    pub accept_proxy: bool,
    /// Trusted sources of PROXY headers (CIDR, repeatable)
    /// [default: 127.0.0.0/8 and ::1/128]. Other sources are refused.
    #[arg(long, value_name = "CIDR", requires = "accept_proxy")]
    pub proxy_from: Vec<String>,
    /// Seconds allowed for the TLS handshake [default: 10].
    #[arg(long, value_name = "SECS")]
    pub handshake_timeout: Option<f64>,
    /// Session ticket key file, nginx's format (80 or 48 random bytes:
    /// `openssl rand 80 > FILE`); repeatable: the first encrypts, all
    /// decrypt [default: random keys rotated in memory].
    #[arg(long, value_name = "FILE")]
    pub ticket_keys: Vec<PathBuf>,
    /// Access log: a file (appended to; SIGUSR1 reopens it), "stdout" or
    /// "off" [default: off]. In a config file, every site's default.
    #[arg(long, value_name = "FILE")]
    pub access_log: Option<String>,
    /// Access log lines: combined (nginx's), tls (combined and the TLS
    /// fields) or json [default: combined].
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub access_log_format: Option<crate::accesslog::Format>,
}

impl GlobalArgs {
    /// Put the flags that were given into `f`, noting where they came from.
    fn lower(&self, f: &mut FileConfig, o: &mut Origins) {
        if !self.listen.is_empty() {
            f.listen = self
                .listen
                .iter()
                .map(|l| toml::Spanned::new(0..0, l.clone()))
                .collect();
            o.flag("listen", "--listen");
        }
        if !self.http_listen.is_empty() {
            f.http_listen = self.http_listen.clone();
            o.flag("http_listen", "--http-listen");
        }
        if let Some(a) = &self.admin {
            f.admin = Some(toml::Spanned::new(0..0, a.clone()));
            o.flag("admin", "--admin");
        }
        if let Some(w) = self.workers {
            f.workers = Some(w);
            o.flag("workers", "--workers");
        }
        if let Some(k) = self.ktls {
            f.ktls = Some(k);
        }
        if let Some(u) = &self.user {
            f.user = Some(u.clone());
            f.group = self.group.clone();
            o.flag("user", "--user");
            o.flag("group", "--group");
        }
        if self.accept_proxy {
            f.accept_proxy = Some(true);
            o.flag("accept_proxy", "--accept-proxy");
        }
        if !self.proxy_from.is_empty() {
            f.proxy_from = Some(self.proxy_from.clone());
            o.flag("proxy_from", "--proxy-from");
        }
        if !self.ticket_keys.is_empty() {
            f.ticket_keys = Some(self.ticket_keys.clone());
            o.flag("ticket_keys", "--ticket-keys");
        }
        if let Some(v) = self.handshake_timeout {
            f.timeouts.handshake = v;
            o.flag("[timeouts] handshake", "--handshake-timeout");
        }
        if let Some(l) = &self.access_log {
            f.access_log = Some(l.clone());
            o.flag("access_log", "--access-log");
        }
        if let Some(v) = self.access_log_format {
            f.access_log_format = Some(v);
        }
    }
}

/// The certificate of the one site of `serve`/`proxy`.
#[derive(Args, Debug, Default)]
pub struct IdentityArgs {
    /// Certificate chain, PEM (server certificate first). Default: a
    /// self-signed certificate made on first run.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key for --cert, PEM (PKCS#8, RSA or EC).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
}

impl IdentityArgs {
    fn lower(&self, f: &mut FileConfig, o: &mut Origins) {
        if let (Some(c), Some(k)) = (&self.cert, &self.key) {
            f.cert = Some(OneOrMany::One(c.clone()));
            f.key = Some(OneOrMany::One(k.clone()));
            o.flag("cert", "--cert");
            o.flag("key", "--key");
        }
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The config file: listeners and [[site]] tables (see docs/CONFIG.md).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    #[command(flatten)]
    pub global: GlobalArgs,
}

impl RunArgs {
    pub fn resolve(&self) -> Result<Settings, ConfigError> {
        let (mut file, text) = FileConfig::load(&self.config)?;
        let mut o = Origins {
            file: Some(self.config.clone()),
            ..Default::default()
        };
        self.global.lower(&mut file, &mut o);
        settings::resolve(file, &text, &o, None)
    }
}

#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// Directory to serve [default: the current directory].
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// List directories that have no index.html.
    #[arg(long)]
    pub autoindex: bool,
    /// Serve files reached through symlinks that lead outside DIR.
    #[arg(long)]
    pub follow_symlinks_outside: bool,
    /// Serve precompressed siblings (app.js.br, .zst, .gz) of these
    /// codings to clients that accept them, preferred first: br,zstd,gzip.
    #[arg(long, value_name = "CODINGS", value_delimiter = ',')]
    pub precompressed: Vec<String>,
    /// Answer paths that do not exist with this file (e.g. /index.html).
    #[arg(long, value_name = "PATH")]
    pub fallback: Option<String>,
    /// Add "; charset=CHARSET" to the Content-Type of text files.
    #[arg(long, value_name = "CHARSET")]
    pub charset: Option<String>,
    /// Files each worker keeps open for its next requests; 0 keeps none
    /// [default: 1000, fewer if the open-file limit is low].
    #[arg(long, value_name = "N")]
    pub open_file_cache: Option<usize>,
    /// Seconds a kept file's path is trusted before it is looked up again
    /// (each request still checks the file's size and time) [default: 1].
    #[arg(long, value_name = "SECS")]
    pub open_file_cache_valid: Option<f64>,
    /// TOML file with these settings plus [limits] and [timeouts] (one
    /// site; for several, use `tlsfront run --config`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seconds allowed to receive a request head [default: 60].
    #[arg(long, value_name = "SECS", alias = "header-timeout")]
    pub request_header_timeout: Option<f64>,
    /// Seconds an idle keep-alive connection is kept [default: 75].
    #[arg(long, value_name = "SECS")]
    pub keepalive_timeout: Option<f64>,
    /// Seconds the client may accept no data while we send [default: 60].
    #[arg(long, value_name = "SECS")]
    pub send_timeout: Option<f64>,
}

/// The config file of `serve`/`proxy`, if any, checked to describe one
/// site at most.
fn one_site_file(
    path: Option<&Path>,
    command: &str,
) -> Result<(FileConfig, String, Origins), ConfigError> {
    let Some(path) = path else {
        return Ok((FileConfig::default(), String::new(), Origins::default()));
    };
    let (file, text) = FileConfig::load(path)?;
    if !file.site.is_empty() {
        return Err(ConfigError::Invalid {
            origin: format!("config file {}", path.display()),
            message: format!(
                "[[site]] tables describe several sites: run them with 'tlsfront run \
                 --config {}' ('tlsfront {command}' serves one site)",
                path.display()
            ),
        });
    }
    let o = Origins {
        file: Some(path.into()),
        ..Default::default()
    };
    Ok((file, text, o))
}

impl ServeArgs {
    /// Defaults, then the config file, then the flags.
    pub fn resolve(&self) -> Result<Settings, ConfigError> {
        let (mut f, text, mut o) = one_site_file(self.config.as_deref(), "serve")?;
        if let Some(b) = &f.backend {
            return Err(ConfigError::Invalid {
                origin: o.of("backend"),
                message: format!(
                    "backend = {b:?} is for 'tlsfront proxy' or 'tlsfront run': serve has a root"
                ),
            });
        }
        self.global.lower(&mut f, &mut o);
        self.identity.lower(&mut f, &mut o);
        if let Some(d) = &self.dir {
            f.root = Some(d.clone());
        }
        if self.autoindex {
            f.autoindex = Some(true);
        }
        if self.follow_symlinks_outside {
            f.follow_symlinks_outside = Some(true);
        }
        if !self.precompressed.is_empty() {
            f.precompressed = Some(self.precompressed.clone());
            o.flag("precompressed", "--precompressed");
        }
        if let Some(fb) = &self.fallback {
            f.fallback = Some(fb.clone());
            o.flag("fallback", "--fallback");
        }
        if let Some(c) = &self.charset {
            f.charset = Some(c.clone());
            o.flag("charset", "--charset");
        }
        if let Some(n) = self.open_file_cache {
            f.open_file_cache = Some(n);
            o.flag("open_file_cache", "--open-file-cache");
        }
        if let Some(v) = self.open_file_cache_valid {
            f.open_file_cache_valid = Some(v);
            o.flag("open_file_cache_valid", "--open-file-cache-valid");
        }
        for (v, slot, key, flag) in [
            (
                self.request_header_timeout,
                &mut f.timeouts.request_header,
                "[timeouts] request_header",
                "--request-header-timeout",
            ),
            (
                self.keepalive_timeout,
                &mut f.timeouts.keepalive,
                "[timeouts] keepalive",
                "--keepalive-timeout",
            ),
            (
                self.send_timeout,
                &mut f.timeouts.send,
                "[timeouts] send",
                "--send-timeout",
            ),
        ] {
            if let Some(v) = v {
                *slot = v;
                o.flag(key, flag);
            }
        }
        settings::resolve(f, &text, &o, Some(Path::new(".")))
    }
}

#[derive(Args, Debug, Default)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// The plain-TCP service: HOST:PORT, or a Unix socket path.
    #[arg(long, value_name = "ADDR", required_unless_present = "config")]
    pub backend: Option<String>,
    /// Send a PROXY protocol header (v1 text, or v2 binary with ALPN, SNI
    /// and SSL TLVs) to the backend first.
    #[arg(long, value_enum, value_name = "VERSION")]
    pub write_proxy: Option<ProxyVersion>,
    /// ALPN protocols to offer, comma-separated (e.g. h2,http/1.1) [default: none].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub alpn: Vec<String>,
    /// TOML file with these settings plus [limits] and [timeouts] (one
    /// site; for several, use `tlsfront run --config`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seconds allowed to connect to the backend [default: 5].
    #[arg(long, value_name = "SECS")]
    pub connect_timeout: Option<f64>,
    /// Seconds without a byte in either direction before closing [default: 300].
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<f64>,
}

impl ProxyArgs {
    /// Defaults, then the config file, then the flags.
    pub fn resolve(&self) -> Result<Settings, ConfigError> {
        let (mut f, text, mut o) = one_site_file(self.config.as_deref(), "proxy")?;
        if f.root.is_some() {
            return Err(ConfigError::Invalid {
                origin: o.of("root"),
                message: "root is for 'tlsfront serve' or 'tlsfront run': proxy has a backend"
                    .into(),
            });
        }
        self.global.lower(&mut f, &mut o);
        self.identity.lower(&mut f, &mut o);
        if let Some(b) = &self.backend {
            f.backend = Some(b.clone());
            o.flag("backend", "--backend");
        }
        if f.backend.is_none() {
            return Err(ConfigError::Invalid {
                origin: o.of("backend"),
                message: "no backend: give --backend HOST:PORT or backend = \"HOST:PORT\"".into(),
            });
        }
        if let Some(v) = self.write_proxy {
            f.write_proxy = Some(v);
        }
        if !self.alpn.is_empty() {
            f.alpn = Some(self.alpn.clone());
            o.flag("alpn", "--alpn");
        }
        for (v, slot, key, flag) in [
            (
                self.connect_timeout,
                &mut f.timeouts.connect,
                "[timeouts] connect",
                "--connect-timeout",
            ),
            (
                self.idle_timeout,
                &mut f.timeouts.idle,
                "[timeouts] idle",
                "--idle-timeout",
            ),
        ] {
            if let Some(v) = v {
                *slot = v;
                o.flag(key, flag);
            }
        }
        settings::resolve(f, &text, &o, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Job;

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
            global: GlobalArgs {
                listen: vec!["[::1]:0".into(), "127.0.0.1:0".into()],
                workers: Some(3),
                ..Default::default()
            },
            keepalive_timeout: Some(1.5),
            ..Default::default()
        };
        let c = a.resolve().unwrap();
        assert_eq!(c.listen.len(), 2);
        assert_eq!(c.sites[0].timeouts.keepalive, 1.5);
        assert_eq!(c.workers, 3);
        let bad = ServeArgs {
            global: GlobalArgs {
                listen: vec!["localhost".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(bad.resolve().unwrap_err().to_string().contains("--listen"));
        let zero = ServeArgs {
            global: GlobalArgs {
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
        let bad = ServeArgs {
            send_timeout: Some(-1.0),
            ..Default::default()
        };
        let e = bad.resolve().unwrap_err().to_string();
        assert!(e.starts_with("--send-timeout: "), "{e}");
    }

    #[test]
    fn flags_win_over_the_file_and_name_themselves() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            "root = \"www\"\nlisten = [\"127.0.0.1:1\"]\nktls = \"off\"\n[timeouts]\nkeepalive = 2.5\n[limits]\nheaders = 7\n",
        )
        .unwrap();
        let a = ServeArgs {
            config: Some(p.clone()),
            ..Default::default()
        };
        let c = a.resolve().unwrap();
        let Job::Files(files) = &c.sites[0].job else {
            panic!("not files")
        };
        assert_eq!(files.root, dir.path().join("www"));
        assert_eq!(c.ktls, KtlsMode::Off);
        assert_eq!(c.sites[0].timeouts.keepalive, 2.5);
        assert_eq!(c.sites[0].limits.headers, 7);
        let a = ServeArgs {
            config: Some(p.clone()),
            dir: Some("/srv".into()),
            keepalive_timeout: Some(4.0),
            ..Default::default()
        };
        let c = a.resolve().unwrap();
        let Job::Files(files) = &c.sites[0].job else {
            panic!("not files")
        };
        assert_eq!(files.root, PathBuf::from("/srv"));
        assert_eq!(c.sites[0].timeouts.keepalive, 4.0);
        // A multi-site file is for `run`.
        std::fs::write(&p, "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n").unwrap();
        let e = ServeArgs {
            config: Some(p.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("tlsfront run --config"), "{e}");
    }

    #[test]
    fn proxy_takes_a_file_too() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            "backend = \"127.0.0.1:9\"\nwrite_proxy = \"v2\"\n[timeouts]\nidle = 30\n[limits]\nconnections = 50\n",
        )
        .unwrap();
        let c = ProxyArgs {
            config: Some(p),
            connect_timeout: Some(1.0),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(c.limits.connections, Some(50));
        assert_eq!(c.sites[0].timeouts.idle, 30.0);
        assert_eq!(c.sites[0].timeouts.connect, 1.0);
        let Job::Backend(b) = &c.sites[0].job else {
            panic!("not a backend")
        };
        assert_eq!(b.write_proxy, Some(ProxyVersion::V2));
        let e = ProxyArgs::default().resolve().unwrap_err().to_string();
        assert!(e.contains("no backend"), "{e}");
    }
}
