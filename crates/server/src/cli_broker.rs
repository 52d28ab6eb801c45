//! `strata broker`: the collection tier's role of the one binary. Flags only; the runtime is the
//! `broker` crate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct BrokerArgs {
    /// The broker's id: its name at the core (`Strata-Source`, and the httptrap check name).
    #[arg(long, env = "STRATA_BROKER_ID", value_name = "ID")]
    pub id: String,
    /// The broker's own directory: its journal, epoch and check phases.
    #[arg(long, env = "STRATA_BROKER_DATA_DIR", value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Forward everything to this core's HTTP ingest, e.g. `http://core:8080`.
    #[arg(long, env = "STRATA_BROKER_CORE_URL", value_name = "URL")]
    pub core_url: Option<String>,
    /// The core's httptrap secret, when it wants one.
    #[arg(long, env = "STRATA_BROKER_CORE_SECRET", value_name = "SECRET")]
    pub core_secret: Option<String>,
    /// Also run the checks a core assigns to this broker (`strata check add … --broker ID`),
    /// fetched from --core-url's checks API every 2 s.
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
    let mut config = broker::BrokerConfig::new(&args.id, &args.data_dir, "");
    config.core_url = args.core_url;
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
            "strata broker {} ready: push_http {} statsd {} checks {}",
            args.id,
            show(broker.bound.push_http),
            show(broker.bound.statsd),
            broker.check_count()
        );
        let _ = tokio::signal::ctrl_c().await;
        broker.stop().await;
        ExitCode::SUCCESS
    })
}
