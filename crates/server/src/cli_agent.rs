//! `strata agent`: the host agent's role of the one binary. Flags only; the runtime is the
//! `agent` crate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

#[derive(Args)]
pub struct AgentArgs {
    /// The agent's config file (TOML, as `strata install agent` writes it).
    #[arg(long, value_name = "FILE", default_value = "/etc/strata/agent.toml")]
    pub config: PathBuf,
    /// Check the config file and exit: 0 when good, 2 naming what is wrong.
    #[arg(long)]
    pub check: bool,
    /// Seconds between periods: how often samples are made and pushed.
    #[arg(long, value_name = "S", default_value_t = agent::PERIOD_S_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub period_s: u64,
    /// Log filter (as RUST_LOG), default `info`.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
}

pub fn run(args: AgentArgs) -> ExitCode {
    let config = match agent::Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("strata agent: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        println!(
            "{}: good ({} mode, host {})",
            args.config.display(),
            mode(&config),
            config.host_id
        );
        return ExitCode::SUCCESS;
    }
    let filter = args
        .log_level
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "info".to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("strata agent: bad log filter ({e}); using `info`");
        tracing_subscriber::EnvFilter::new("info")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    // One thread: the agent's work is a few file reads a second, and its footprint is the point.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(4)
        .thread_name("strata-agent")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("strata agent: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let host = config.host_id.clone();
    let mode = mode(&config);
    let ready = move |b: agent::Bound| {
        let show =
            |a: Option<std::net::SocketAddr>| a.map_or_else(|| "-".to_owned(), |a| a.to_string());
        // One line a script (or a test) can wait for, with the addresses actually bound.
        println!(
            "strata agent {host} ready: mode {mode} http {} statsd {}",
            show(b.http),
            show(b.statsd)
        );
    };
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let period = Duration::from_secs(args.period_s);
    match runtime.block_on(agent::run(config, period, ready, stop)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata agent: {e}");
            ExitCode::from(1)
        }
    }
}

fn mode(config: &agent::Config) -> &'static str {
    match config.mode {
        agent::config::Mode::Push => "push",
        agent::config::Mode::Pull => "pull",
        agent::config::Mode::Reverse => "reverse",
    }
}
