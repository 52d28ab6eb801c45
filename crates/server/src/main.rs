//! `strata`: one binary for the server and every operator tool.
//!
//! Each subcommand family lives in its own module (`cli_*.rs`); `main` only dispatches and turns
//! errors into exit codes: 0 success, 1 runtime failure, 2 bad input or usage.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "strata", version, about = "Strata: a histogram-native monitoring system")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the monitoring server (HTTP API and UI, statsd, Graphite) with an embedded store.
    Serve,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve => {
            eprintln!(
                "strata serve: the server is not built yet in this version; \
                 see the README for what works today"
            );
            ExitCode::from(1)
        }
    }
}
