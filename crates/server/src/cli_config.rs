//! `strata serve`'s configuration: defaults < TOML file < environment (`STRATA_*`) < flags, and
//! `strata config print-defaults | show`.
//!
//! The file is strict (`deny_unknown_fields`): a misspelt key is an error naming it, not a
//! silently ignored setting.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

/// The listener address that disables a listener.
pub const LISTENER_OFF: &str = "off";

/// Largest configuration file read, so a wrong path (a device, a huge log) fails fast.
const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;

/// The full default configuration with every documented key, as `print-defaults` prints it.
/// A unit test asserts it parses to exactly `Config::default()`.
pub const DEFAULTS_TOML: &str = r#"# strata serve configuration. Precedence: flags > environment (STRATA_*) > this file > defaults.

[listeners]
# Addresses to listen on; "off" disables a listener; port 0 picks a free port.
http = "127.0.0.1:8112"      # HTTP API (--http, STRATA_HTTP)
statsd = "127.0.0.1:8125"    # statsd / DogStatsD over UDP (--statsd, STRATA_STATSD)
graphite = "127.0.0.1:2003"  # Graphite plaintext over TCP (--graphite, STRATA_GRAPHITE)
# collectd's binary network protocol over UDP (--collectd, STRATA_COLLECTD); off unless set,
# e.g. "127.0.0.1:25826" (collectd's port). Signed or encrypted datagrams are refused.
collectd = "off"

[store]
data_dir = "./strata-data"   # --data-dir, STRATA_DATA_DIR
# Histograms are merged per base period; at least 1 s.
base_period_s = 60
# When a write is acknowledged: "group" (after the fdatasync shared by concurrent writers),
# "always" (a sync per write) or "buffered" (page cache only: survives a crash, not power loss).
durability = "group"

[limits]
body_size_bytes_max = 67108864      # request body, before and after gzip; over it: 413
request_timeout_ms = 30000          # whole HTTP request, body included; over it: 408
http_concurrency_max = 1024         # HTTP requests served at once; the rest wait
graphite_connections_max = 1024     # Graphite TCP connections at once; the rest wait
graphite_idle_timeout_ms = 300000   # a Graphite connection silent this long is closed
udp_datagram_bytes_max = 65507      # longer statsd datagrams are truncated by the kernel
line_bytes_max = 65536              # a longer Graphite line is rejected (and skipped)
query_series_max = 10000            # series one find / fetch returns at most
# Open HTTP and Graphite connections from one client address at once (each listener): more
# are closed when accepted. HTTP and Graphite connections at once are bounded by the open-file
# limit too (raised to its hard limit at start): 3/4 of it for HTTP (at most 10,000), 1/4 for
# Graphite (at most graphite_connections_max).
connections_per_address_max = 256
# For a connection's first byte, a request's headers and the next request on a kept-alive
# connection: a connection that sends nothing this long is closed.
header_read_timeout_ms = 10000
# After the first 10 s of a body, it must have arrived at least this fast on average, or the
# request is answered 408 and its connection closed.
body_rate_bytes_per_s_min = 1024
# Memory all native fetches at once may hold, estimated from series x slices before reading:
# one fetch over it is refused with a 422, one that does not fit beside the others with a 503.
query_memory_bytes_max = 536870912
# PromQL range answers kept for the settled past (older than 5 minutes), so a dashboard's next
# refresh evaluates only its new steps; a write reaching further back, a deletion or retention
# drops what it changed. 0: off. Hits and misses: strata_query_result_cache_* in /metrics.
query_result_cache_bytes_max = 67108864

[cardinality]
# New series are held to these limits; series that exist are always written. A series over a
# limit is refused (its samples left out, the rest of the request stored): 429 on Influx and
# httptrap, 400 on remote write (Prometheus resends a 429 forever), OTLP partial success;
# the body names the limit and the metric. A "source" is the exactly-once sender
# (Strata-Source), or else the httptrap check, or the client's address (statsd: "statsd").
# Counts and refusals: strata_series_* in /metrics.
series_new_per_minute_max = 200000         # new series per minute, all sources
series_active_max = 2000000                # active series, all sources
source_series_new_per_minute_max = 100000  # new series per minute from one source
source_series_active_max = 1000000         # active series one source created
# A series is active while it has a sample timestamped this recently.
active_window_s = 3600

[statsd]
# Datagrams are aggregated per interval (counters summed, gauges last, timers merged into
# histograms) and written to the store once per interval.
flush_interval_ms = 10000
# The socket's kernel receive buffer: a burst larger than it is dropped by the kernel (counted
# in /metrics as strata_statsd_kernel_drops_total). The kernel caps it at net.core.rmem_max.
receive_buffer_bytes = 8388608

[collectd]
# The socket's kernel receive buffer: a burst larger than it is dropped by the kernel (counted
# in /metrics as strata_collectd_kernel_drops_total). The kernel caps it at net.core.rmem_max.
receive_buffer_bytes = 8388608

[graphite]
# Each connection's samples are written at least this often, or when this many are buffered.
flush_interval_ms = 1000
flush_samples_max = 10000

[auth]
# A bearer token required on every request but /health (Authorization: Bearer <token>).
# token = "change-me"
# Web pages of these origins ("https://grafana.example.com:3000") may call the API from a
# browser. A request whose Origin is another site's, or whose Sec-Fetch-Site says cross-site
# or same-site, is refused with a 403; the server's own UI, Telegraf, Prometheus, statsd and
# the SDKs send none or their own and are unaffected.
allowed_origins = []
# Host names (no port) the HTTP API answers to, so a DNS-rebinding page cannot reach it by a
# name of its own. Empty: localhost, 127.0.0.1 and [::1] while the HTTP listener is loopback;
# any name otherwise.
allowed_hosts = []

[http]
# Web pages of these origins ("https://grafana.example.com:3000") may read the answers of the
# HTTP API from a browser (CORS: preflights answered, Access-Control-Allow-Origin on answers;
# they are also let through the cross-site check above). Empty: no CORS answers at all.
cors_origins = []

[tls]
# PEM files; when both are set the HTTP listener speaks HTTPS only.
# cert = "/etc/strata/cert.pem"
# key = "/etc/strata/key.pem"

[httptrap]
# Secret for /module/httptrap/<check>/<secret> when the check has none of its own. With no
# secret configured at all, any secret is accepted only while the HTTP listener is loopback.
# secret = "change-me"

[httptrap.checks]
# Per-check secrets: check name = secret.
# mycheck = "s3cret"

[otlp]
# OTLP resource attributes become labels as the OpenTelemetry-Prometheus compatibility spec
# says: service.name (after service.namespace and "/") is `job`, service.instance.id is
# `instance`, and every other attribute goes on one `target_info` series per resource. These
# attributes also go on every series of their resource (at most 64).
promote_resource_attributes = []
# Metric and attribute names as Prometheus 3.5's OTLP receiver makes them:
# "UnderscoreEscapingWithSuffixes" (http.server.duration in s -> http_server_duration_seconds,
# monotonic sums end in _total, gauges of unit "1" in _ratio, host.name -> host_name),
# "NoUTF8EscapingWithSuffixes" (names kept, suffixes added) or "NoTranslation" (kept as sent).
translation_strategy = "UnderscoreEscapingWithSuffixes"

[alerts]
# Rulesets evaluated when each period closes; states journaled in <data_dir>/alerts.
enabled = true
# A directory of read-only rules files (*.toml); rulesets made through the API live in
# <data_dir>/alerts/rules.
# rules_dir = "/etc/strata/rules"
grace_ms = 5000                # a period is evaluated this long after it closes (late data)
catch_up_periods_max = 1440    # after downtime, periods re-evaluated per ruleset
eager_interval_ms = 250        # eager rulesets look at the open period this often
push_sources = true            # built-in rule: a push source silent for `factor` × its interval
push_sources_factor = 3.0
push_sources_severity = 3
# Notifications: routes, receivers (webhook, alertmanager, file), maintenance windows, in the
# alert crate's notification TOML (see crates/alert/README.md).
# notify = "/etc/strata/notify.toml"

[log]
# tracing filter (RUST_LOG syntax), e.g. "info" or "server=debug,info"; RUST_LOG and
# --log-level override it.
level = "info"
"#;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub listeners: Listeners,
    pub store: StoreConfig,
    pub limits: Limits,
    pub cardinality: CardinalityConfig,
    pub statsd: StatsdConfig,
    pub collectd: CollectdConfig,
    pub graphite: GraphiteConfig,
    pub auth: Auth,
    pub http: HttpConfig,
    pub tls: Tls,
    pub httptrap: Httptrap,
    pub otlp: OtlpConfig,
    pub alerts: AlertsConfig,
    pub log: Log,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpConfig {
    pub promote_resource_attributes: Vec<String>,
    /// Prometheus's `otlp.translation_strategy` name.
    pub translation_strategy: String,
}

impl Default for OtlpConfig {
    fn default() -> OtlpConfig {
        OtlpConfig {
            promote_resource_attributes: Vec::new(),
            translation_strategy: ingest::otlp::Strategy::default().name().to_owned(),
        }
    }
}

impl OtlpConfig {
    /// The translation the OTLP parser applies (the strategy checked by `validate`).
    pub fn translation(&self) -> ingest::otlp::Translation {
        ingest::otlp::Translation {
            promote: self.promote_resource_attributes.clone(),
            strategy: ingest::otlp::Strategy::from_name(&self.translation_strategy)
                .unwrap_or_default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    pub enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules_dir: Option<PathBuf>,
    pub grace_ms: u64,
    pub catch_up_periods_max: u64,
    pub eager_interval_ms: u64,
    pub push_sources: bool,
    pub push_sources_factor: f64,
    pub push_sources_severity: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify: Option<PathBuf>,
}

impl Default for AlertsConfig {
    fn default() -> AlertsConfig {
        AlertsConfig {
            enabled: true,
            rules_dir: None,
            grace_ms: 5_000,
            catch_up_periods_max: 1_440,
            eager_interval_ms: 250,
            push_sources: true,
            push_sources_factor: 3.0,
            push_sources_severity: 3,
            notify: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Listeners {
    pub http: String,
    pub statsd: String,
    pub graphite: String,
    pub collectd: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    pub data_dir: PathBuf,
    pub base_period_s: u32,
    pub durability: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub body_size_bytes_max: u64,
    pub request_timeout_ms: u64,
    pub http_concurrency_max: usize,
    pub graphite_connections_max: usize,
    pub graphite_idle_timeout_ms: u64,
    pub udp_datagram_bytes_max: usize,
    pub line_bytes_max: usize,
    pub query_series_max: usize,
    pub query_memory_bytes_max: u64,
    pub query_result_cache_bytes_max: u64,
    pub connections_per_address_max: usize,
    pub header_read_timeout_ms: u64,
    pub body_rate_bytes_per_s_min: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CardinalityConfig {
    pub series_new_per_minute_max: u64,
    pub series_active_max: u64,
    pub source_series_new_per_minute_max: u64,
    pub source_series_active_max: u64,
    pub active_window_s: u64,
}

impl Default for CardinalityConfig {
    fn default() -> CardinalityConfig {
        CardinalityConfig {
            series_new_per_minute_max: 200_000,
            series_active_max: 2_000_000,
            source_series_new_per_minute_max: 100_000,
            source_series_active_max: 1_000_000,
            active_window_s: 3_600,
        }
    }
}

impl CardinalityConfig {
    /// The store's limits.
    pub fn options(&self) -> store::CardinalityOptions {
        store::CardinalityOptions {
            series_new_per_minute_max: self.series_new_per_minute_max,
            series_active_max: self.series_active_max,
            source_series_new_per_minute_max: self.source_series_new_per_minute_max,
            source_series_active_max: self.source_series_active_max,
            active_window_ms: i64::try_from(self.active_window_s.saturating_mul(1000))
                .unwrap_or(i64::MAX),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatsdConfig {
    pub flush_interval_ms: u64,
    pub receive_buffer_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CollectdConfig {
    pub receive_buffer_bytes: u64,
}

impl Default for CollectdConfig {
    fn default() -> CollectdConfig {
        CollectdConfig {
            receive_buffer_bytes: 8 << 20,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GraphiteConfig {
    pub flush_interval_ms: u64,
    pub flush_samples_max: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Auth {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub cors_origins: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tls {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Httptrap {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub checks: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    pub level: String,
}

impl Default for Listeners {
    fn default() -> Listeners {
        Listeners {
            http: "127.0.0.1:8112".to_owned(),
            statsd: "127.0.0.1:8125".to_owned(),
            graphite: "127.0.0.1:2003".to_owned(),
            collectd: LISTENER_OFF.to_owned(),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            data_dir: PathBuf::from("./strata-data"),
            base_period_s: 60,
            durability: "group".to_owned(),
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            body_size_bytes_max: 64 << 20,
            request_timeout_ms: 30_000,
            http_concurrency_max: 1024,
            graphite_connections_max: 1024,
            graphite_idle_timeout_ms: 300_000,
            udp_datagram_bytes_max: 65_507,
            line_bytes_max: 65_536,
            query_series_max: 10_000,
            query_memory_bytes_max: 512 << 20,
            query_result_cache_bytes_max: 64 << 20,
            connections_per_address_max: 256,
            header_read_timeout_ms: 10_000,
            body_rate_bytes_per_s_min: 1024,
        }
    }
}

impl Default for StatsdConfig {
    fn default() -> StatsdConfig {
        StatsdConfig {
            flush_interval_ms: 10_000,
            receive_buffer_bytes: 8 << 20,
        }
    }
}

impl Default for GraphiteConfig {
    fn default() -> GraphiteConfig {
        GraphiteConfig {
            flush_interval_ms: 1_000,
            flush_samples_max: 10_000,
        }
    }
}

impl Default for Log {
    fn default() -> Log {
        Log {
            level: "info".to_owned(),
        }
    }
}

/// The settings that flags and environment variables may override (flags win over env; clap
/// reads both into the same field).
#[derive(Args, Clone, Debug, Default)]
pub struct ServeArgs {
    /// HTTP listen address, or `off`.
    #[arg(long, env = "STRATA_HTTP", value_name = "ADDR")]
    pub http: Option<String>,
    /// statsd UDP listen address, or `off`.
    #[arg(long, env = "STRATA_STATSD", value_name = "ADDR")]
    pub statsd: Option<String>,
    /// Graphite TCP listen address, or `off`.
    #[arg(long, env = "STRATA_GRAPHITE", value_name = "ADDR")]
    pub graphite: Option<String>,
    /// collectd (binary network protocol) UDP listen address, or `off` (the default).
    #[arg(long, env = "STRATA_COLLECTD", value_name = "ADDR")]
    pub collectd: Option<String>,
    /// Data directory (the store's WAL and index).
    #[arg(long, env = "STRATA_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// TOML configuration file (`strata config print-defaults` shows every key).
    #[arg(long, env = "STRATA_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log filter (RUST_LOG syntax); overrides the file's `log.level` and RUST_LOG.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Serve HTTP on a non-loopback address without `auth.token`: every write, read and delete
    /// open to the network. Without it such a server refuses to start.
    #[arg(long)]
    pub insecure_open: bool,
    /// Run as one process of a cluster on Kafka: the topology file (`docs/cluster.md`).
    #[arg(long, value_name = "FILE", requires = "node")]
    pub cluster: Option<PathBuf>,
    /// Which node of the topology this process is (its roles, side and HTTP address).
    #[arg(long, value_name = "NAME", requires = "cluster")]
    pub node: Option<String>,
    /// Accept brokers' TLS link dials here (`strata broker --core-link`); brokers the core
    /// dials are registered with `dial: core` and need no listener.
    #[arg(long, env = "STRATA_LINK_LISTEN", value_name = "ADDR")]
    pub link_listen: Option<std::net::SocketAddr>,
}

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Print the full default configuration (TOML, every key documented).
    PrintDefaults,
    /// Print the configuration `strata serve` would run with, after file, env and flags.
    Show(Box<ServeArgs>),
}

pub fn run(command: ConfigCommand) -> ExitCode {
    match command {
        ConfigCommand::PrintDefaults => {
            print!("{DEFAULTS_TOML}");
            ExitCode::SUCCESS
        }
        ConfigCommand::Show(args) => match resolve(&args) {
            Ok(config) => match toml::to_string(&config) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("strata config show: cannot render the configuration: {e}");
                    ExitCode::from(1)
                }
            },
            Err(e) => {
                eprintln!("strata config show: {e}");
                ExitCode::from(2)
            }
        },
    }
}

/// Reads and checks a configuration file.
pub fn load_file(path: &Path) -> Result<Config, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("config file {}: {e}", path.display()))?;
    if meta.len() > CONFIG_FILE_BYTES_MAX {
        return Err(format!(
            "config file {}: {} bytes, over the max {CONFIG_FILE_BYTES_MAX}",
            path.display(),
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("config file {}: {e}", path.display()))
}

/// defaults < file < env < flags, then checked.
pub fn resolve(args: &ServeArgs) -> Result<Config, String> {
    let mut config = match &args.config {
        Some(path) => load_file(path)?,
        None => Config::default(),
    };
    if let Some(http) = &args.http {
        config.listeners.http = http.clone();
    }
    if let Some(statsd) = &args.statsd {
        config.listeners.statsd = statsd.clone();
    }
    if let Some(graphite) = &args.graphite {
        config.listeners.graphite = graphite.clone();
    }
    if let Some(collectd) = &args.collectd {
        config.listeners.collectd = collectd.clone();
    }
    if let Some(dir) = &args.data_dir {
        config.store.data_dir = dir.clone();
    }
    if let Some(level) = &args.log_level {
        config.log.level = level.clone();
    }
    validate(&config)?;
    Ok(config)
}

/// A listener address: `None` for `off`, the socket address otherwise.
pub fn listener_addr(what: &str, text: &str) -> Result<Option<std::net::SocketAddr>, String> {
    if text.eq_ignore_ascii_case(LISTENER_OFF) {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|e| {
        format!("listeners.{what}: `{text}` is not an address like 127.0.0.1:8112 or `off` ({e})")
    })
}

pub fn durability(text: &str) -> Result<store::Durability, String> {
    match text {
        "group" => Ok(store::Durability::default()),
        "always" => Ok(store::Durability::Always),
        "buffered" => Ok(store::Durability::Buffered),
        other => Err(format!(
            "store.durability: `{other}` is not one of group, always, buffered"
        )),
    }
}

fn validate_alerts(a: &AlertsConfig) -> Result<(), String> {
    if !(a.push_sources_factor.is_finite() && a.push_sources_factor >= 1.0) {
        return Err("alerts.push_sources_factor must be at least 1".into());
    }
    if !(1..=5).contains(&a.push_sources_severity) {
        return Err("alerts.push_sources_severity must be 1 to 5".into());
    }
    if a.catch_up_periods_max == 0 || a.eager_interval_ms == 0 {
        return Err("alerts.catch_up_periods_max and eager_interval_ms must be positive".into());
    }
    Ok(())
}

fn validate(config: &Config) -> Result<(), String> {
    listener_addr("http", &config.listeners.http)?;
    listener_addr("statsd", &config.listeners.statsd)?;
    listener_addr("graphite", &config.listeners.graphite)?;
    listener_addr("collectd", &config.listeners.collectd)?;
    durability(&config.store.durability)?;
    let positive = [
        ("store.base_period_s", config.store.base_period_s as u64),
        (
            "limits.body_size_bytes_max",
            config.limits.body_size_bytes_max,
        ),
        (
            "limits.request_timeout_ms",
            config.limits.request_timeout_ms,
        ),
        (
            "limits.http_concurrency_max",
            config.limits.http_concurrency_max as u64,
        ),
        (
            "limits.graphite_connections_max",
            config.limits.graphite_connections_max as u64,
        ),
        (
            "limits.graphite_idle_timeout_ms",
            config.limits.graphite_idle_timeout_ms,
        ),
        (
            "limits.udp_datagram_bytes_max",
            config.limits.udp_datagram_bytes_max as u64,
        ),
        ("limits.line_bytes_max", config.limits.line_bytes_max as u64),
        (
            "limits.query_series_max",
            config.limits.query_series_max as u64,
        ),
        (
            "limits.query_memory_bytes_max",
            config.limits.query_memory_bytes_max,
        ),
        (
            "limits.connections_per_address_max",
            config.limits.connections_per_address_max as u64,
        ),
        (
            "limits.header_read_timeout_ms",
            config.limits.header_read_timeout_ms,
        ),
        (
            "limits.body_rate_bytes_per_s_min",
            config.limits.body_rate_bytes_per_s_min,
        ),
        (
            "cardinality.series_new_per_minute_max",
            config.cardinality.series_new_per_minute_max,
        ),
        (
            "cardinality.series_active_max",
            config.cardinality.series_active_max,
        ),
        (
            "cardinality.source_series_new_per_minute_max",
            config.cardinality.source_series_new_per_minute_max,
        ),
        (
            "cardinality.source_series_active_max",
            config.cardinality.source_series_active_max,
        ),
        (
            "cardinality.active_window_s",
            config.cardinality.active_window_s,
        ),
        ("statsd.flush_interval_ms", config.statsd.flush_interval_ms),
        (
            "statsd.receive_buffer_bytes",
            config.statsd.receive_buffer_bytes,
        ),
        (
            "collectd.receive_buffer_bytes",
            config.collectd.receive_buffer_bytes,
        ),
        (
            "graphite.flush_interval_ms",
            config.graphite.flush_interval_ms,
        ),
        (
            "graphite.flush_samples_max",
            config.graphite.flush_samples_max as u64,
        ),
    ];
    for (key, value) in positive {
        if value == 0 {
            return Err(format!("{key} must be positive"));
        }
    }
    validate_alerts(&config.alerts)?;
    let promoted = config.otlp.promote_resource_attributes.len();
    if promoted > ingest::otlp::PROMOTE_MAX {
        return Err(format!(
            "otlp.promote_resource_attributes: {promoted} attributes, at most {}",
            ingest::otlp::PROMOTE_MAX
        ));
    }
    if ingest::otlp::Strategy::from_name(&config.otlp.translation_strategy).is_none() {
        return Err(format!(
            "otlp.translation_strategy: {:?} is not UnderscoreEscapingWithSuffixes, \
             NoUTF8EscapingWithSuffixes or NoTranslation",
            config.otlp.translation_strategy
        ));
    }
    if config.limits.udp_datagram_bytes_max > 65_535 {
        return Err("limits.udp_datagram_bytes_max: a UDP datagram is at most 65535 bytes".into());
    }
    if config.tls.cert.is_some() != config.tls.key.is_some() {
        return Err("tls: set both cert and key, or neither".to_owned());
    }
    if config.auth.token.as_deref() == Some("") {
        return Err("auth.token: empty; remove the key to disable the token".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn defaults_text_parses_to_the_default_config() {
        let parsed: Config = toml::from_str(DEFAULTS_TOML).unwrap();
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn unknown_key_is_named() {
        let e = toml::from_str::<Config>("[limits]\nbody_size_max = 3\n").unwrap_err();
        assert!(e.to_string().contains("body_size_max"), "{e}");
    }

    #[test]
    fn promoted_otlp_attributes_are_read_and_bounded() {
        let config: Config =
            toml::from_str("[otlp]\npromote_resource_attributes = [\"k8s.pod.name\"]\n").unwrap();
        assert_eq!(config.otlp.promote_resource_attributes, ["k8s.pod.name"]);
        assert!(validate(&config).is_ok());
        let mut many = Config::default();
        many.otlp.promote_resource_attributes = (0..=ingest::otlp::PROMOTE_MAX)
            .map(|i| format!("a{i}"))
            .collect();
        let e = validate(&many).unwrap_err();
        assert!(e.contains("otlp.promote_resource_attributes"), "{e}");
    }

    #[test]
    fn otlp_translation_strategy_is_read_and_checked() {
        assert_eq!(
            Config::default().otlp.translation().strategy,
            ingest::otlp::Strategy::UnderscoreEscapingWithSuffixes
        );
        let config: Config =
            toml::from_str("[otlp]\ntranslation_strategy = \"NoTranslation\"\n").unwrap();
        assert_eq!(
            config.otlp.translation().strategy,
            ingest::otlp::Strategy::NoTranslation
        );
        let mut bad = Config::default();
        bad.otlp.translation_strategy = "Utf8".to_owned();
        let e = validate(&bad).unwrap_err();
        assert!(e.contains("otlp.translation_strategy"), "{e}");
    }

    #[test]
    fn off_disables_and_bad_address_is_named() {
        assert_eq!(listener_addr("http", "off").unwrap(), None);
        let e = listener_addr("statsd", "localhost").unwrap_err();
        assert!(e.contains("listeners.statsd"), "{e}");
    }
}
