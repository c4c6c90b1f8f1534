//! The `tlsfront` binary: parse the command line, run the command, and turn
//! errors into one clear line and a non-zero exit.

use clap::Parser;
use std::process::ExitCode;
use tlsfront::cli::{Cli, Command, ConfigCommand};
use tlsfront::config::{ConfigError, Settings};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TLSFRONT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
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
        Command::Bench(args) => tlsfront::bench::run(*args).map_err(|e| e.to_string()),
        Command::Check => {
            let (text, all) = tlsfront::check::report(&tlsfront::ktls::Support::probe());
            print!("{text}");
            return if all {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tlsfront: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolve the settings and run them. SIGHUP resolves them again: the
/// config file, certificates and ticket keys are read anew; the flags stay
/// as given.
fn serve(resolve: impl Fn() -> Result<Settings, ConfigError> + 'static) -> Result<(), String> {
    let settings = resolve().map_err(|e| e.to_string())?;
    tlsfront::server::run(settings, Some(Box::new(resolve))).map_err(|e| e.to_string())
}
