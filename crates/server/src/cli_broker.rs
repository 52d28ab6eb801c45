//! `strata broker`: the collection tier's role of the one binary (flags only; the runtime is the
//! `broker` crate), and `strata broker init|list|register|rm`: the broker's link identity and
//! the core's broker registry (`/api/strata/v1/brokers`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::cli_check::CoreArgs;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BrokerArgs {
    #[command(subcommand)]
    pub command: Option<BrokerCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Subcommand)]
pub enum BrokerCommand {
    /// Make the broker's link key pair and certificate in DIR (its data directory) and print
    /// what registers it on the core.
    Init {
        /// The broker's data directory (`--data-dir` when it runs).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// The broker's id, for the printed registration.
        #[arg(long, value_name = "ID", default_value = "edge-1")]
        id: String,
    },
    /// The brokers a core has registered, with each link's state, last contact, backlog, lag.
    List {
        #[command(flatten)]
        core: CoreArgs,
    },
    /// Register a broker on a core by its certificate (`strata broker init` prints it).
    Register {
        #[arg(long, value_name = "ID")]
        id: String,
        /// The SHA-256 of the broker's certificate.
        #[arg(long, value_name = "HEX")]
        sha256: String,
        /// Who opens the link: `broker` (it dials the core's --link-listen) or `core` (the core
        /// dials the broker's --link-listen at --address).
        #[arg(long, default_value = "broker", value_parser = ["broker", "core"])]
        dial: String,
        /// host:port of the broker's --link-listen, with --dial core.
        #[arg(long, value_name = "HOST:PORT")]
        address: Option<String>,
        #[command(flatten)]
        core: CoreArgs,
    },
    /// Remove a broker from a core (its links end).
    Rm {
        #[arg(long, value_name = "ID")]
        id: String,
        #[command(flatten)]
        core: CoreArgs,
    },
}

#[derive(Args)]
pub struct RunArgs {
    /// The broker's id: its name at the core (`Strata-Source`, and the httptrap check name).
    #[arg(long, env = "STRATA_BROKER_ID", value_name = "ID")]
    pub id: Option<String>,
    /// The broker's own directory: its journal, epoch, check phases and link identity.
    #[arg(long, env = "STRATA_BROKER_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Forward everything to this core's HTTP ingest, e.g. `http://core:8080`.
    #[arg(long, env = "STRATA_BROKER_CORE_URL", value_name = "URL")]
    pub core_url: Option<String>,
    /// Or over a TLS link: dial the core's `--link-listen` at this host:port.
    #[arg(long, value_name = "HOST:PORT")]
    pub core_link: Option<String>,
    /// Dial --core-link through this HTTP CONNECT proxy (`http://host:port`).
    #[arg(long, value_name = "URL", requires = "core_link")]
    pub proxy: Option<String>,
    /// Or wait for the core to dial the link here (registered with `--dial core`).
    #[arg(long, value_name = "ADDR")]
    pub link_listen: Option<SocketAddr>,
    /// The core's link certificate SHA-256 (`strata broker list` and `register` print it).
    #[arg(long, value_name = "HEX")]
    pub core_sha256: Option<String>,
    /// The core's httptrap secret, when it wants one.
    #[arg(long, env = "STRATA_BROKER_CORE_SECRET", value_name = "SECRET")]
    pub core_secret: Option<String>,
    /// Also run the checks a core assigns to this broker (`strata check add … --broker ID`),
    /// fetched from the core (--core-url or the link) every 2 s.
    #[arg(long)]
    pub checks_from_core: bool,
    /// A file holding the core's bearer token (a core started with auth.token): sent with
    /// the forwarded data and the checks API's requests.
    #[arg(long, value_name = "FILE")]
    pub core_token_file: Option<PathBuf>,
    /// Checks to run: a TOML file of `[[check]]` tables.
    #[arg(long, value_name = "FILE")]
    pub checks: Option<PathBuf>,
    /// Accept pushes (httptrap, remote write, OTLP) over HTTP here.
    #[arg(long, value_name = "ADDR")]
    pub push_http: Option<SocketAddr>,
    /// Accept statsd over UDP here.
    #[arg(long, value_name = "ADDR")]
    pub statsd: Option<SocketAddr>,
    /// Accept collectd's binary network protocol over UDP here (collectd's port is 25826).
    #[arg(long, value_name = "ADDR")]
    pub collectd: Option<SocketAddr>,
    /// Accept links of agents in reverse mode here (`[reverse] broker` in the agent's config);
    /// agents are registered on the broker's --push-http with `strata broker register --core
    /// http://<push address>`, and pin the certificate SHA-256 it prints.
    #[arg(long, value_name = "ADDR")]
    pub agent_listen: Option<SocketAddr>,
    /// A file holding the bearer token the agent registry requires (without it, only loopback
    /// clients may register agents).
    #[arg(long, value_name = "FILE", requires = "agent_listen")]
    pub agents_token_file: Option<PathBuf>,
    /// OTLP resource attributes also put on every series of their resource (comma-separated),
    /// as the core's `[otlp] promote_resource_attributes`.
    #[arg(long, value_name = "KEYS", value_delimiter = ',')]
    pub otlp_promote_resource_attributes: Vec<String>,
    /// OTLP metric and attribute names as Prometheus 3.5's receiver makes them, as the core's
    /// `[otlp] translation_strategy`: UnderscoreEscapingWithSuffixes, NoUTF8EscapingWithSuffixes
    /// or NoTranslation.
    #[arg(
        long,
        value_name = "STRATEGY",
        default_value = "UnderscoreEscapingWithSuffixes"
    )]
    pub otlp_translation_strategy: String,
    /// The journal's disk budget in bytes; past it the oldest data is dropped, counted.
    #[arg(long, value_name = "BYTES", default_value_t = broker::DISK_BYTES_MAX_DEFAULT)]
    pub disk_bytes_max: u64,
    /// Runs going at once, at most.
    #[arg(long, value_name = "N", default_value_t = broker::RUNS_MAX_DEFAULT)]
    pub runs_max: usize,
    /// Log filter (as RUST_LOG), default `info`.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
}

pub fn run(args: BrokerArgs) -> ExitCode {
    let result = match args.command {
        None => return run_broker(args.run),
        Some(BrokerCommand::Init { dir, id }) => init(&dir, &id),
        Some(BrokerCommand::List { core }) => list(&core),
        Some(BrokerCommand::Register {
            id,
            sha256,
            dial,
            address,
            core,
        }) => register(&id, &sha256, &dial, address, &core),
        Some(BrokerCommand::Rm { id, core }) => rm(&id, &core),
    };
    match result {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("strata broker: {message}");
            ExitCode::from(code)
        }
    }
}

type Failure = (u8, String);

/// Makes (or reads, when there) the broker's identity and says how to register it.
fn init(dir: &Path, id: &str) -> Result<String, Failure> {
    std::fs::create_dir_all(dir).map_err(|e| (1, format!("{}: {e}", dir.display())))?;
    let stem = broker::tls::LINK_STEM;
    let existed = dir.join(format!("{stem}.crt")).exists();
    let identity = broker::tls::load_or_generate(dir, stem, id).map_err(|e| (1, e))?;
    let fp = identity.fingerprint().map_err(|e| (1, e))?;
    let made = if existed { "kept" } else { "made" };
    let body = json!({"id": id, "certificate_sha256": fp, "dial": "broker"});
    Ok(format!(
        "identity {made}: {dir}/{stem}.crt and {dir}/{stem}.key (the key is readable by its \
         owner only)\n\
         certificate sha256: {fp}\n\
         register it on the core (the broker dials the core's --link-listen):\n  \
         strata broker register --core http://CORE:8112 --id {id} --sha256 {fp}\n\
         or, for the core to dial this broker's --link-listen:\n  \
         strata broker register --core http://CORE:8112 --id {id} --sha256 {fp} --dial core \
         --address HOST:PORT\n\
         or by the API:\n  \
         curl -X POST http://CORE:8112/api/strata/v1/brokers -H 'Content-Type: \
         application/json' -d '{body}'\n",
        dir = dir.display()
    ))
}

fn list(core: &CoreArgs) -> Result<String, Failure> {
    let server = core.server()?;
    let a = crate::cli_rules::http(&server, "GET", "/api/strata/v1/brokers", "", &[])?;
    let v = crate::cli_rules::json_answer(a.status, &a.body)?;
    Ok(table(&v, crate::serve::now_ms()))
}

/// The brokers answer as a table a person reads.
fn table(v: &Value, now_ms: i64) -> String {
    let mut out = format!(
        "core sha256: {}\nlink listener: {}\n",
        v["core_sha256"].as_str().unwrap_or("?"),
        v["listen"].as_str().unwrap_or("off")
    );
    out.push_str(&format!(
        "{:<24} {:<6} {:<9} {:>12} {:>15} {:>13} {:>8}\n",
        "ID", "DIAL", "LINK", "CONTACT_AGO", "BACKLOG_RECORDS", "BACKLOG_BYTES", "LAG_S"
    ));
    for b in v["brokers"].as_array().into_iter().flatten() {
        let last = b["last_contact_ms"].as_i64().unwrap_or(0);
        let ago = if last == 0 {
            "never".to_owned()
        } else {
            format!("{:.1}s", (now_ms - last).max(0) as f64 / 1000.0)
        };
        let up = if b["connected"].as_bool() == Some(true) {
            "up"
        } else {
            "down"
        };
        out.push_str(&format!(
            "{:<24} {:<6} {:<9} {:>12} {:>15} {:>13} {:>8.1}\n",
            b["id"].as_str().unwrap_or("?"),
            b["dial"].as_str().unwrap_or("?"),
            up,
            ago,
            b["backlog_records"].as_u64().unwrap_or(0),
            b["backlog_bytes"].as_u64().unwrap_or(0),
            b["lag_s"].as_f64().unwrap_or(0.0),
        ));
    }
    out
}

fn register(
    id: &str,
    sha256: &str,
    dial: &str,
    address: Option<String>,
    core: &CoreArgs,
) -> Result<String, Failure> {
    let server = core.server()?;
    let mut body = json!({"id": id, "certificate_sha256": sha256, "dial": dial});
    if let Some(a) = address {
        body["address"] = json!(a);
    }
    let headers = [("Content-Type", "application/json")];
    let a = crate::cli_rules::http(
        &server,
        "POST",
        "/api/strata/v1/brokers",
        &body.to_string(),
        &headers,
    )?;
    let v = crate::cli_rules::json_answer(a.status, &a.body)?;
    let core_fp = v["core_sha256"].as_str().unwrap_or("?");
    let listen = v["listen"].as_str().unwrap_or("off");
    Ok(format!(
        "registered broker {id}\ncore sha256: {core_fp} (run the broker with --core-sha256 \
         {core_fp})\ncore link listener: {listen}\n"
    ))
}

fn rm(id: &str, core: &CoreArgs) -> Result<String, Failure> {
    let server = core.server()?;
    let path = format!("/api/strata/v1/brokers/{}", crate::cli_rules::encode(id));
    let a = crate::cli_rules::http(&server, "DELETE", &path, "", &[])?;
    if a.status != 204 {
        crate::cli_rules::json_answer(a.status, &a.body)?;
    }
    Ok(format!("removed broker {id}\n"))
}

fn run_broker(args: RunArgs) -> ExitCode {
    let filter = args
        .log_level
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "info".to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("strata broker: bad log filter ({e}); using `info`");
        tracing_subscriber::EnvFilter::new("info")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let (Some(id), Some(data_dir)) = (args.id.clone(), args.data_dir.clone()) else {
        eprintln!("strata broker: --id and --data-dir are required");
        return ExitCode::from(2);
    };
    let mut config = broker::BrokerConfig::new(&id, &data_dir);
    config.core_url = args.core_url;
    config.core_link = args.core_link;
    config.proxy = args.proxy;
    config.link_listen = args.link_listen;
    config.core_sha256 = args.core_sha256.unwrap_or_default();
    config.core_secret = args.core_secret;
    config.checks_file = args.checks;
    config.checks_from_core = args.checks_from_core;
    if let Some(path) = &args.core_token_file {
        match std::fs::read_to_string(path) {
            Ok(t) => config.core_token = Some(t.trim().to_owned()),
            Err(e) => {
                eprintln!("strata broker: --core-token-file {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    config.push_http = args.push_http;
    config.statsd = args.statsd;
    config.collectd = args.collectd;
    config.agent_listen = args.agent_listen;
    if let Some(path) = &args.agents_token_file {
        match std::fs::read_to_string(path) {
            Ok(t) if !t.trim().is_empty() => config.agents_token = Some(t.trim().to_owned()),
            Ok(_) => {
                eprintln!(
                    "strata broker: --agents-token-file {}: empty",
                    path.display()
                );
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("strata broker: --agents-token-file {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    let Some(strategy) = ingest::otlp::Strategy::from_name(&args.otlp_translation_strategy) else {
        eprintln!(
            "strata broker: --otlp-translation-strategy {:?} is not UnderscoreEscapingWithSuffixes, \
             NoUTF8EscapingWithSuffixes or NoTranslation",
            args.otlp_translation_strategy
        );
        return ExitCode::from(2);
    };
    if args.otlp_promote_resource_attributes.len() > ingest::otlp::PROMOTE_MAX {
        eprintln!(
            "strata broker: --otlp-promote-resource-attributes: at most {} attributes",
            ingest::otlp::PROMOTE_MAX
        );
        return ExitCode::from(2);
    }
    config.otlp = ingest::otlp::Translation {
        promote: args.otlp_promote_resource_attributes,
        strategy,
    };
    config.runs_max = args.runs_max;
    config.spool.disk_bytes_max = args.disk_bytes_max;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("strata-broker")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("strata broker: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let broker = match broker::Broker::start(config).await {
            Ok(b) => b,
            Err(e) => {
                eprintln!("strata broker: {e}");
                return ExitCode::from(1);
            }
        };
        // One line a script (or a test) can wait for, with the addresses actually bound.
        let show = |a: Option<SocketAddr>| a.map_or_else(|| "-".to_owned(), |a| a.to_string());
        println!(
            "strata broker {id} ready: push_http {} statsd {} collectd {} link_listen {} \
             agent_listen {} checks {}",
            show(broker.bound.push_http),
            show(broker.bound.statsd),
            show(broker.bound.collectd),
            show(broker.bound.listen),
            show(broker.bound.agent_listen),
            broker.check_count()
        );
        let _ = tokio::signal::ctrl_c().await;
        broker.stop().await;
        ExitCode::SUCCESS
    })
}
