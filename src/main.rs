//! The `tlsfront` binary: parse the command line, run the command, and turn
//! errors into one clear line and a non-zero exit.

use clap::Parser;
use std::process::ExitCode;
use tlsfront::cli::{Cli, Command};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TLSFRONT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let result = args
                .resolve()
                .map_err(|e| e.to_string())
                .and_then(|cfg| tlsfront::http::session::run(cfg).map_err(|e| e.to_string()));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tlsfront: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Proxy(args) => {
            let result = args
                .resolve()
                .map_err(|e| e.to_string())
                .and_then(|cfg| tlsfront::proxy::run(cfg).map_err(|e| e.to_string()));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tlsfront: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Bench(args) => match tlsfront::bench::run(*args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tlsfront: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Check => {
            let (text, all) = tlsfront::check::report(&tlsfront::ktls::Support::probe());
            print!("{text}");
            if all {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
    }
}
