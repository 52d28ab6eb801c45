//! `strata install agent` and `strata uninstall agent`: the command line over the `install`
//! crate. Exit codes: 0 done, 1 a step failed (the steps done so far are printed), 2 bad usage.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum InstallCommand {
    /// Install the agent on this host (or under --root) and register it with a core: files,
    /// systemd unit, checks, worksheet and alert rules; running it again changes nothing.
    Agent(AgentArgs),
}

#[derive(Subcommand)]
pub enum UninstallCommand {
    /// Stop and remove the agent; --purge also removes its config, identity, state and every
    /// object the host owns on the core.
    Agent(UninstallArgs),
}

#[derive(Args)]
pub struct AgentArgs {
    /// The core (`strata serve`), e.g. http://core:8112.
    #[arg(long)]
    core: String,
    /// A file holding the core's bearer token (never pass the token itself).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// How data reaches the core: push (the agent sends), pull (a broker scrapes the agent),
    /// reverse (the agent connects out to a broker).
    #[arg(long, default_value = "push")]
    mode: String,
    /// The broker: its name on the core (pull), or host:port (reverse).
    #[arg(long)]
    broker: Option<String>,
    /// Reverse mode through a broker: the broker's push URL (`strata broker --push-http`),
    /// whose agent registry the agent is registered on and whose `--agent-listen` it dials.
    #[arg(long, value_name = "URL")]
    broker_api: Option<String>,
    /// A file holding the broker's agents token (`strata broker --agents-token-file`).
    #[arg(long, value_name = "FILE", requires = "broker_api")]
    broker_token_file: Option<PathBuf>,
    /// Plugins to set up, comma-separated (host is always set up).
    #[arg(long, value_delimiter = ',', default_value = "host")]
    plugins: Vec<String>,
    /// Install under this directory instead of / (paths in the files written point under it).
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// The init system: systemd, or none (files only; start `strata agent` yourself).
    #[arg(long, default_value = "systemd")]
    init: String,
    /// Say what would change; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// The report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Replace an existing agent config that differs from the one this run would write.
    #[arg(long)]
    force_config: bool,
    /// The agent's HTTP listener (written into its config).
    #[arg(long, default_value = "127.0.0.1:2609")]
    listen: String,
    /// The agent's statsd listener (off, or "", disables it).
    #[arg(long, default_value = "127.0.0.1:8125")]
    statsd: String,
    /// The postgres plugin: the server to check (host:port).
    #[arg(long, default_value = "127.0.0.1:5432")]
    postgres_target: String,
    /// The postgres plugin: the monitoring role the broker's check logs in as.
    #[arg(long, default_value = "postgres")]
    postgres_user: String,
    /// The postgres plugin: an administrator that creates the monitoring role (LOGIN, member
    /// of pg_monitor) when it is missing; without one the role must exist.
    #[arg(long)]
    postgres_admin_user: Option<String>,
    /// A file holding that administrator's password (never pass the password itself).
    #[arg(long)]
    postgres_admin_password_file: Option<PathBuf>,
    /// The redis plugin: the server to check and observe (host:port).
    #[arg(long, default_value = "127.0.0.1:6379")]
    redis_target: String,
    /// The http plugin: the local web server's port the observer watches.
    #[arg(long, default_value_t = 80)]
    http_port: u16,
    /// The http plugin: the URL its check requests (default http://127.0.0.1:<http-port>/).
    #[arg(long)]
    http_url: Option<String>,
    /// The interface the plugins' traffic crosses, where the observer captures it (lo when
    /// the clients are local; eth0 or the like for a web server's remote clients).
    #[arg(long, default_value = "lo")]
    observe_iface: String,
    /// Seconds to wait for the host's first sample on the core (0: do not wait).
    #[arg(long, default_value_t = 30)]
    wait_s: u64,
}

#[derive(Args)]
pub struct UninstallArgs {
    /// The core (default: the one in the agent's config).
    #[arg(long)]
    core: Option<String>,
    /// A file holding the core's bearer token (default: the agent's token file).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// The broker whose agent registry holds this agent (reverse mode through a broker).
    #[arg(long, value_name = "URL")]
    broker_api: Option<String>,
    /// A file holding the broker's agents token.
    #[arg(long, value_name = "FILE", requires = "broker_api")]
    broker_token_file: Option<PathBuf>,
    #[arg(long, default_value = "/")]
    root: PathBuf,
    #[arg(long, default_value = "systemd")]
    init: String,
    /// Also remove the config, token, host identity, state and the host's objects on the core.
    #[arg(long)]
    purge: bool,
    #[arg(long)]
    dry_run: bool,
    #[arg(long)]
    json: bool,
}

const PLUGINS: [&str; 4] = ["host", "postgres", "redis", "http"];

fn options(a: AgentArgs) -> Result<install::Options, String> {
    if let Some(p) = a.plugins.iter().find(|p| !PLUGINS.contains(&p.as_str())) {
        return Err(format!(
            "--plugins {p}: not available yet (available: {})",
            PLUGINS.join(", ")
        ));
    }
    if a.wait_s > install::WAIT_S_MAX {
        return Err(format!(
            "--wait-s {}: at most {}",
            a.wait_s,
            install::WAIT_S_MAX
        ));
    }
    let postgres = a
        .plugins
        .iter()
        .any(|p| p == "postgres")
        .then(|| (a.postgres_target.clone(), a.postgres_user.clone()));
    let wants = |name: &str| a.plugins.iter().any(|p| p == name);
    let redis = wants("redis").then(|| a.redis_target.clone());
    if wants("http") && a.http_port == 0 {
        return Err("--http-port 0: give the web server's port".into());
    }
    let http = wants("http").then(|| {
        let url = a
            .http_url
            .clone()
            .unwrap_or_else(|| format!("http://127.0.0.1:{}/", a.http_port));
        (a.http_port, url)
    });
    let binary = std::env::current_exe().map_err(|e| format!("finding the running binary: {e}"))?;
    Ok(install::Options {
        core: a.core,
        token_file: a.token_file,
        mode: install::Mode::parse(&a.mode)?,
        broker: a.broker,
        registry: a.broker_api.map(|url| (url, a.broker_token_file)),
        plugins: a.plugins,
        root: a.root,
        init: install::Init::parse(&a.init)?,
        dry_run: a.dry_run,
        force_config: a.force_config,
        listen: a.listen,
        statsd: if a.statsd == "off" {
            String::new()
        } else {
            a.statsd
        },
        binary,
        wait_s: a.wait_s,
        postgres,
        redis,
        http,
        observe_iface: a.observe_iface,
        postgres_admin: a
            .postgres_admin_user
            .map(|user| (user, a.postgres_admin_password_file)),
    })
}

fn finish(what: &str, json: bool, result: Result<install::Report, install::Failure>) -> ExitCode {
    match result {
        Ok(report) => {
            if json {
                println!("{}", report.json());
            } else {
                print!("{}", report.text());
            }
            ExitCode::SUCCESS
        }
        Err(f) => {
            if json {
                let mut v = f.report.json();
                v["error"] = serde_json::json!(f.message);
                println!("{v}");
            } else {
                print!("{}", f.report.text());
            }
            eprintln!("strata {what}: {}", f.message);
            ExitCode::from(1)
        }
    }
}

pub fn run_install(command: InstallCommand) -> ExitCode {
    let InstallCommand::Agent(args) = command;
    let json = args.json;
    match options(args) {
        Ok(o) => finish("install agent", json, install::install(&o)),
        Err(e) => {
            eprintln!("strata install agent: {e}");
            ExitCode::from(2)
        }
    }
}

pub fn run_uninstall(command: UninstallCommand) -> ExitCode {
    let UninstallCommand::Agent(a) = command;
    let init = match install::Init::parse(&a.init) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("strata uninstall agent: {e}");
            return ExitCode::from(2);
        }
    };
    let o = install::UninstallOptions {
        core: a.core,
        token_file: a.token_file,
        registry: a.broker_api.map(|url| (url, a.broker_token_file)),
        root: a.root,
        init,
        purge: a.purge,
        dry_run: a.dry_run,
    };
    finish("uninstall agent", a.json, install::uninstall(&o))
}
