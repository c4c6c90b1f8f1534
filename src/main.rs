//! The `tlsfront` binary: parse the command line, run the command, and turn
//! errors into one clear line and a non-zero exit.

use clap::Parser;
use std::process::ExitCode;
use tlsfront::cli::{
    AcmeCommand, Cli, Command, ConfigCommand, GenerateCommand, GlobalArgs, RunArgs,
};
use tlsfront::config::{ConfigError, Settings};

/// What the event log (stderr) shows without `TLSFRONT_LOG`: tlsfront's own
/// events from `info` up, the libraries' warnings. docs/LOGGING.md lists them.
const DEFAULT_LOG: &str = "warn,tlsfront=info";

/// Rust's allocations go to mimalloc; C code (aws-lc) still calls glibc's
/// malloc. The server gives both allocators' free memory back to the kernel
/// (`server::release_free_heap`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    init_log();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => serve(move || args.resolve()),
        Command::Serve(args) => serve(move || args.resolve()),
        Command::Proxy(args) => serve(move || args.resolve()),
        Command::Config(ConfigCommand::Check { file }) => {
            let (text, ok) = tlsfront::config::check::report(&file);
            print!("{text}");
            return if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Command::Acme(AcmeCommand::Revoke { config, name }) => revoke(config, &name),
        Command::Check => {
            let (text, all) = tlsfront::check::report(&tlsfront::ktls::Support::probe());
            print!("{text}");
            return if all {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
        Command::Generate(what) => generate(what),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tlsfront: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `tlsfront generate`: the man pages into a directory, or a completion
/// script on stdout.
fn generate(what: GenerateCommand) -> Result<(), String> {
    match what {
        GenerateCommand::Man { dir } => {
            for (name, page) in tlsfront::cli::man_pages() {
                let path = dir.join(name);
                std::fs::write(&path, page)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            }
            Ok(())
        }
        GenerateCommand::Completions { shell } => {
            use std::io::Write;
            std::io::stdout()
                .write_all(&tlsfront::cli::completions(shell))
                .map_err(|e| format!("cannot write to stdout: {e}"))
        }
    }
}

/// `tlsfront acme revoke`: revoke the certificate stored for the ACME site
/// that has `name`, and remove it.
fn revoke(config: std::path::PathBuf, name: &str) -> Result<(), String> {
    let settings = RunArgs {
        config,
        global: GlobalArgs::default(),
    }
    .resolve()
    .map_err(|e| e.to_string())?;
    let want = name.trim_end_matches('.').to_ascii_lowercase();
    let Some(site) = settings
        .sites
        .iter()
        .find(|s| s.acme && s.names.contains(&want))
    else {
        return Err(format!(
            "no site with acme = true has the name {name:?} in {}",
            settings
                .file
                .as_ref()
                .map_or_else(String::new, |p| p.display().to_string())
        ));
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    match rt.block_on(tlsfront::acme::revoke_stored(&settings.acme, &site.names)) {
        Ok(Some(serial)) => {
            println!(
                "revoked the certificate for {} (serial {serial}) and removed it: reload \
                 tlsfront (SIGHUP, systemctl reload tlsfront) to serve a new one",
                site.names.join(", ")
            );
            Ok(())
        }
        Ok(None) => Err(format!(
            "no certificate is stored for {} in {}",
            site.names.join(", "),
            settings.acme.state_dir.display()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The event log on stderr, filtered by `TLSFRONT_LOG` (else
/// [`DEFAULT_LOG`]); the libraries' warnings rate-limited
/// ([`tlsfront::lograte::LibraryWarnings`]); colours only on a terminal (not
/// in a file or the journal).
fn init_log() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{filter, EnvFilter, Layer};
    let env =
        || EnvFilter::try_from_env("TLSFRONT_LOG").unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG));
    let not_library = filter::filter_fn(|m| !tlsfront::lograte::is_library_warning(m));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter::FilterExt::and(env(), not_library));
    tracing_subscriber::registry()
        .with(fmt)
        .with(tlsfront::lograte::LibraryWarnings::default().with_filter(env()))
        .init();
}

/// Resolve the settings and run them. SIGHUP resolves them again: the
/// config file, certificates and ticket keys are read anew; the flags stay
/// as given.
///
/// Started by tlsfront's privileged parent, this is its server process: it
/// becomes `user` before it reads anything. Started as root with `user`
/// set, this becomes that parent.
fn serve(resolve: impl Fn() -> Result<Settings, ConfigError> + 'static) -> Result<(), String> {
    use tlsfront::server::Role;
    let link = tlsfront::privsep::ChildLink::take().map_err(|e| e.to_string())?;
    let role = match link {
        Some(link) => Role::Child {
            parent: link.install().map_err(|e| e.to_string())?,
        },
        None => Role::Alone,
    };
    let settings = resolve().map_err(|e| e.to_string())?;
    if role == Role::Alone && tlsfront::parent::wanted(&settings) {
        return tlsfront::parent::run(settings, Box::new(resolve)).map_err(|e| e.to_string());
    }
    tlsfront::server::run(settings, Some(Box::new(resolve)), role).map_err(|e| e.to_string())
}
