//! `strata`: one binary for the server and every operator tool.
//!
//! Each subcommand family lives in its own module (`cli_*.rs`); `main` only dispatches and turns
//! errors into exit codes: 0 success, 1 runtime failure, 2 bad input or usage.

mod cli_agent;
mod cli_alerts;
mod cli_broker;
mod cli_check;
mod cli_clock;
mod cli_config;
mod cli_install;
mod cli_journal;
mod cli_maintenance;
mod cli_observe;
mod cli_query;
mod cli_routes;
mod cli_rules;
mod cli_store;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli_cluster;
mod cli_hist;

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Strata: a histogram-native monitoring system"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the monitoring server (HTTP API and UI, statsd, Graphite) with an embedded store.
    Serve(cli_config::ServeArgs),
    /// A cluster's partitions, owners, lag and health.
    Cluster {
        #[command(subcommand)]
        command: cli_cluster::ClusterCommand,
    },
    /// Print the default configuration, or the one `strata serve` would run with.
    Config {
        #[command(subcommand)]
        command: cli_config::ConfigCommand,
    },
    /// Encode, inspect, merge and decode log-linear histograms (circllhist base64).
    #[command(subcommand)]
    Hist(cli_hist::HistCommand),
    /// Inspect, verify, repair and benchmark a journal directory, and manage its subscribers.
    Journal {
        #[command(subcommand)]
        command: cli_journal::JournalCommand,
    },
    /// Inspect and verify a store directory (read-only; safe beside a running server).
    Store {
        #[command(subcommand)]
        command: cli_store::StoreCommand,
    },
    /// Evaluate an analytics (CAQL) query against a running server or a store directory.
    Query(cli_query::QueryArgs),
    /// Record every request's latency off the wire (HTTP, PostgreSQL, Redis, MySQL, Kafka,
    /// Cassandra).
    Observe(cli_observe::ObserveArgs),
    /// Check, unit-test and backtest alerting rulesets.
    Rules {
        #[command(subcommand)]
        command: cli_rules::RulesCommand,
    },
    /// List the alerts a running server holds.
    Alerts {
        #[command(subcommand)]
        command: cli_alerts::AlertsCommand,
    },
    /// Maintenance windows on a running server: add, list, remove.
    Maintenance {
        #[command(subcommand)]
        command: cli_maintenance::MaintenanceCommand,
    },
    /// Run a broker: checks on a schedule and pushes, journaled and forwarded to a core exactly
    /// once.
    Broker(Box<cli_broker::BrokerArgs>),
    /// Run the host agent: the host's metrics as histograms, NAD plugins, local statsd and
    /// httptrap, pushed exactly once to a core or broker, or pulled.
    Agent(cli_agent::AgentArgs),
    /// Try a check: run a spec once and print what a broker would record.
    Check {
        #[command(subcommand)]
        command: cli_check::CheckCommand,
    },
    /// Install the agent on this host and register it with a core (one step, idempotent).
    Install {
        #[command(subcommand)]
        command: cli_install::InstallCommand,
    },
    /// Remove the agent (--purge: also its files and its objects on the core).
    Uninstall {
        #[command(subcommand)]
        command: cli_install::UninstallCommand,
    },
    /// Check the clock Strata times itself with: its source (TSC or OS), why, and its cost.
    Clock {
        #[command(subcommand)]
        command: cli_clock::ClockCommand,
    },
}

/// mimalloc keeps freed pages for reuse; see the dependency's note in Cargo.toml.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Cluster { command } => cli_cluster::run(command),
        Command::Config { command } => cli_config::run(command),
        Command::Hist(cmd) => cli_hist::run(cmd),
        Command::Journal { command } => cli_journal::run(command),
        Command::Store { command } => cli_store::run(command),
        Command::Clock { command } => cli_clock::run(command),
        Command::Query(args) => cli_query::run(args),
        Command::Observe(args) => cli_observe::run(args),
        Command::Rules { command } => cli_rules::run(command),
        Command::Alerts { command } => cli_alerts::run(command),
        Command::Maintenance { command } => cli_maintenance::run(command),
        Command::Broker(args) => cli_broker::run(*args),
        Command::Agent(args) => cli_agent::run(args),
        Command::Check { command } => cli_check::run(command),
        Command::Install { command } => cli_install::run_install(command),
        Command::Uninstall { command } => cli_install::run_uninstall(command),
    }
}
