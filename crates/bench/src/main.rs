//! The `tlsfront-bench` binary: parse the command line, run the
//! measurement, and turn errors into one clear line and a non-zero exit.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    match tlsfront_bench::run(tlsfront_bench::BenchArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tlsfront-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
