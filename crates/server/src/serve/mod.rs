//! `strata serve`: the HTTP API, the statsd and Graphite listeners, self-monitoring, and the
//! embedded store they all write to.
//!
//! Every write is acknowledged only after the store's write returned (durable at the
//! configured level), and every write goes through one function, [`App::store_inserted`]. The
//! store blocks (fsync), so writes run on tokio's blocking pool, at most `WRITERS_MAX` at once;
//! concurrent writers share the journal's group commit.

mod alerts;
mod budget;
mod cluster_ops;
mod cluster_read;
mod clustered;
mod collectd;
mod conn;
mod download;
mod exemplars;
mod graphite;
mod http;
mod kept;
mod link;
mod lograte;
mod metadata;
mod metrics;
mod origin;
mod overview;
mod read;
mod reply;
mod saved;
mod statsd;
mod ui;
mod write;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use insert::{Inserted, SeriesCache};
use store::{Store, StoreOptions, Written};
use tokio::sync::{watch, Semaphore};

use crate::cli_config::{self, Config, ServeArgs};
pub use metrics::{Endpoint, Metrics};
pub use reply::ServeError;

/// Store writes in flight at once (each holds a blocking-pool thread until its group commit).
pub const WRITERS_MAX: usize = 32;
/// How long shutdown waits for the last references to the store before closing it anyway.
const CLOSE_WAIT_MS_MAX: u64 = 10_000;

/// What every handler and listener shares.
pub struct App {
    pub store: Arc<Store>,
    pub config: Config,
    /// The HTTP listener is bound to a loopback address (httptrap without secrets is allowed).
    pub http_loopback: bool,
    pub metrics: Metrics,
    writers: Semaphore,
    /// Requests being worked on at once (`limits.http_concurrency_max`); an ingest request
    /// takes its slot once its body has arrived.
    pub request_slots: Semaphore,
    /// Request body bytes held at once, counted as they arrive and as gzip produces them.
    pub body_budget: Arc<budget::BodyBudget>,
    /// The statsd socket's inode, to read its kernel drops from `/proc` for `/metrics`.
    pub statsd_inode: Option<u64>,
    /// The collectd socket's inode, likewise.
    pub collectd_inode: Option<u64>,
    /// HTTP connections the connection limits closed.
    pub conn_metrics: Arc<conn::ConnMetrics>,
    /// Memory all native fetches at once may hold, taken before a fetch reads.
    pub query_budget: budget::QueryBudget,
    /// Series ids by the bytes clients send for a series (httptrap, Influx, remote write):
    /// this store's.
    pub series_ids: SeriesCache,
    /// Metric metadata senders described (`/api/v1/metadata`).
    pub metadata: Arc<metadata::Registry>,
    /// Exemplars senders sent (`/api/v1/query_exemplars`).
    pub exemplars: Arc<exemplars::Exemplars>,
    /// PromQL range answers over the settled past (`limits.query_result_cache_bytes_max`).
    pub range_cache: Option<Arc<promql::range_cache::RangeCache>>,
    /// The addresses actually bound (port 0 resolved), for the landing page's examples.
    pub listening: Listening,
    /// This process's part of a cluster (`--cluster`); `None` for a single node.
    pub cluster: Option<Arc<clustered::ClusterRole>>,
    /// How OTLP resource attributes become tags (`[otlp]` in the config).
    pub otlp: ingest::otlp::Translation,
}

/// Where the server listens: `None` for a listener that is off.
#[derive(Clone, Debug, Default)]
pub struct Listening {
    pub http: Option<String>,
    pub statsd: Option<String>,
    pub graphite: Option<String>,
    pub collectd: Option<String>,
    pub tls: bool,
}

/// The environment variable that lowers a server's series id cache bound (entries), so tests
/// can push many series past it.
pub const SERIES_CACHE_ENTRIES_MAX_ENV: &str = "STRATA_SERIES_CACHE_ENTRIES_MAX";

/// The series id cache, with the bound from [`SERIES_CACHE_ENTRIES_MAX_ENV`] when set (lower
/// only).
fn series_cache_from_env() -> SeriesCache {
    let entries_max = std::env::var(SERIES_CACHE_ENTRIES_MAX_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(insert::ENTRIES_MAX_DEFAULT, |n| {
            n.clamp(1, insert::ENTRIES_MAX_DEFAULT)
        });
    SeriesCache::new(entries_max)
}

pub type Shared = Arc<App>;

/// The cardinality limits' sender of the server's own writes (self-monitoring, alert states).
pub const SENDER_SERVER: &str = "server";
/// The sender of statsd's aggregated intervals (a datagram's sender is not kept).
pub const SENDER_STATSD: &str = "statsd";

/// Receipt time in ms since the epoch, from the fast wall clock.
pub fn now_ms() -> i64 {
    (clock::wall() / 1_000_000) as i64
}

impl App {
    /// Writes a batch the server made itself (a statsd interval, self-monitoring) on the
    /// blocking pool.
    pub async fn write(
        self: &Arc<Self>,
        batch: store::WriteBatch,
        sender: &'static str,
    ) -> Result<(), ServeError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.write_blocking(move |app| app.store_inserted(None, &mut Inserted::from(batch), sender))
            .await
            .map(drop)
    }

    /// Writes what a body became — the one place the server writes to the store — unless its
    /// parse stopped or nothing is left: the store leaves out (and reports) samples of a key
    /// that exists with another kind, which become rejections; the series the batch created
    /// are then learned into the id cache. Counted under `endpoint` (bodies of clients only).
    /// A batch whose origin was applied before is not applied again: `Written::Duplicate`.
    /// New series are held to the cardinality limits for `sender` (unless the batch names its
    /// exactly-once source, which is then the sender).
    pub(crate) fn store_inserted(
        &self,
        endpoint: Option<Endpoint>,
        inserted: &mut Inserted,
        sender: &str,
    ) -> Result<Written, ServeError> {
        // A cluster front hands clients' bodies to Kafka; what the server makes itself
        // (self-monitoring) stays in its own store.
        if let (Some(role), Some(endpoint)) = (self.cluster_front(), endpoint) {
            if !inserted.stopped && !inserted.batch.is_empty() {
                role.produce(&self.store, &inserted.batch, now_ms())?;
            }
            self.metrics
                .batch(endpoint, inserted.accepted, inserted.rejected_total);
            return Ok(Written::Applied);
        }
        let mut written = Written::Applied;
        if !inserted.stopped && !inserted.batch.is_empty() {
            let stopwatch = clock::Stopwatch::start();
            let result = self.store.write_limited(&inserted.batch, sender);
            self.metrics
                .store_write(stopwatch.elapsed_ns(), result.is_ok());
            match result {
                Ok(w) if w.written == Written::Applied => {
                    inserted.apply_kind_rejections(&w.kind_rejections);
                    inserted.apply_cardinality_refusals(&w.refused);
                    inserted.learn(&self.store, &self.series_ids);
                }
                Ok(_) => written = Written::Duplicate,
                Err(e) => {
                    let endpoint = endpoint.map_or("server", |e| e.name());
                    let refusal = ServeError::from_store(&e);
                    // The client's own fault (a stale epoch, a kind clash) is its answer, not
                    // the operator's concern.
                    if refusal.status.is_server_error() {
                        tracing::warn!(error = %e, endpoint, "store write failed");
                    } else {
                        tracing::debug!(error = %e, endpoint, "store write refused");
                    }
                    return Err(refusal);
                }
            }
        }
        // A duplicate's samples were counted when first applied.
        if let (Some(endpoint), Written::Applied) = (endpoint, written) {
            self.metrics
                .batch(endpoint, inserted.accepted, inserted.rejected_total);
        }
        Ok(written)
    }

    /// The cluster role when this process is a cluster front.
    fn cluster_front(&self) -> Option<&clustered::ClusterRole> {
        self.cluster.as_deref().filter(|r| r.is_front())
    }

    /// Writes a batch of client data the server aggregated itself (statsd): to Kafka on a
    /// cluster front, to the store otherwise.
    pub async fn write_ingest(
        self: &Arc<Self>,
        batch: store::WriteBatch,
    ) -> Result<(), ServeError> {
        if batch.is_empty() || self.cluster_front().is_none() {
            return self.write(batch, SENDER_STATSD).await;
        }
        self.write_blocking(move |app| match app.cluster_front() {
            Some(role) => role.produce(&app.store, &batch, now_ms()),
            None => Ok(()),
        })
        .await
    }

    /// Runs one write on the blocking pool, holding a writer permit (`writers` bounds the
    /// bodies being written at once); every write goes through here.
    pub async fn write_blocking<T, F>(self: &Arc<Self>, write: F) -> Result<T, ServeError>
    where
        T: Send + 'static,
        F: FnOnce(&App) -> Result<T, ServeError> + Send + 'static,
    {
        let _permit = self
            .writers
            .acquire()
            .await
            .map_err(|_| ServeError::shutting_down())?;
        let app = self.clone();
        // A cluster front's answer carries the offsets Kafka gave the write (its token).
        let produced = cluster_read::collector();
        let joined =
            tokio::task::spawn_blocking(move || cluster_read::collecting(produced, || write(&app)))
                .await;
        joined.unwrap_or_else(|e| {
            Err(ServeError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("write task failed: {e}"),
            ))
        })
    }
}

/// Entry point of `strata serve`.
pub fn run(args: ServeArgs) -> ExitCode {
    let config = match cli_config::resolve(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("strata serve: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&args, &config);
    let open_files_max = raise_open_files_limit();
    // Transparent huge pages off for this process: the allocator hands freed request and batch
    // buffers back to the kernel in small pieces and takes them again, and every fault in a
    // huge-page region zeroes 2 MiB, which on histogram ingest cost a fifth to a third of the
    // server's CPU (the ingest rates are in bench/RESULTS.md, "strata serve ingest"). An older
    // kernel without the switch just keeps them.
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::debug!("transparent huge pages stay enabled: {e}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("strata-serve")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("strata serve: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let cluster = match (&args.cluster, &args.node) {
        (Some(path), Some(node)) => match load_topology(path, node) {
            Ok(found) => Some(found),
            Err(e) => {
                eprintln!("strata serve: {e}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let mut config = config;
    if let Some((_, node)) = &cluster {
        // The topology says where each node listens, so that the others can reach it.
        config.listeners.http = node.http.clone();
    }
    let link_listen = args.link_listen;
    match runtime.block_on(serve(
        config,
        open_files_max,
        args.insecure_open,
        cluster,
        link_listen,
    )) {
        Ok(()) => {
            cluster_ops::exec_if_restart_requested();
            ExitCode::SUCCESS
        }
        Err(e) => {
            // Once, plainly: the log and the terminal are the same stream here.
            eprintln!("strata serve: {e}");
            ExitCode::from(1)
        }
    }
}

/// The topology and this process's node in it.
fn load_topology(
    path: &std::path::Path,
    name: &str,
) -> Result<(cluster::Topology, cluster::Node), String> {
    let topology = cluster::Topology::load(path).map_err(|e| e.to_string())?;
    let node = topology.node(name).cloned().ok_or_else(|| {
        format!(
            "--node {name}: {} names no such node (it has {})",
            path.display(),
            topology
                .nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    Ok((topology, node))
}

/// `--log-level` wins, then `RUST_LOG`, then the file's `log.level`.
fn init_logging(args: &ServeArgs, config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = match (&args.log_level, std::env::var("RUST_LOG")) {
        (Some(level), _) => EnvFilter::try_new(level),
        (None, Ok(env)) if !env.is_empty() => EnvFilter::try_new(env),
        _ => EnvFilter::try_new(&config.log.level),
    }
    .unwrap_or_else(|e| {
        eprintln!("strata serve: bad log filter ({e}); using `info`");
        EnvFilter::new("info")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Files the server keeps open besides connections: the store's segments, journal, index and
/// blocks, the listeners, the runtime's own.
const FILES_RESERVED: u64 = 512;
/// Open files when the limit cannot be read.
const OPEN_FILES_ASSUMED: u64 = 1024;

/// Raises the soft open-file limit to the hard one (a default soft limit of 1,024 hung the
/// server at 1,100 idle connections); the soft limit in force afterwards.
fn raise_open_files_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if limit.current.is_some() && limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
                tracing::info!(from = soft, to = now, "open-file limit raised");
                return now;
            }
            Err(e) => tracing::warn!(soft, error = %e, "cannot raise the open-file limit"),
        }
    }
    if soft == 0 {
        OPEN_FILES_ASSUMED
    } else {
        soft
    }
}

/// Connections the open-file limit leaves room for, after `FILES_RESERVED`: three quarters
/// for HTTP (at most `conn::CONNECTIONS_MAX`), a quarter for Graphite (at most its configured
/// bound).
struct ConnectionBudget {
    http: usize,
    graphite: usize,
}

fn connection_budget(open_files_max: u64, config: &Config) -> ConnectionBudget {
    let room = open_files_max.saturating_sub(FILES_RESERVED).max(64);
    let share = |part: u64, cap: usize| {
        usize::try_from(room / 4 * part)
            .unwrap_or(usize::MAX)
            .clamp(1, cap)
    };
    ConnectionBudget {
        http: share(3, conn::CONNECTIONS_MAX),
        graphite: share(1, config.limits.graphite_connections_max),
    }
}

async fn serve(
    config: Config,
    open_files_max: u64,
    insecure_open: bool,
    cluster: Option<(cluster::Topology, cluster::Node)>,
    link_listen: Option<SocketAddr>,
) -> Result<(), String> {
    let connection_budget = connection_budget(open_files_max, &config);
    tracing::info!(
        open_files_max,
        http_connections_max = connection_budget.http,
        graphite_connections_max = connection_budget.graphite,
        "connection limits"
    );
    let http_addr = cli_config::listener_addr("http", &config.listeners.http)?;
    let statsd_addr = cli_config::listener_addr("statsd", &config.listeners.statsd)?;
    let graphite_addr = cli_config::listener_addr("graphite", &config.listeners.graphite)?;
    let collectd_addr = cli_config::listener_addr("collectd", &config.listeners.collectd)?;
    let options = StoreOptions {
        base_period_ms: i64::from(config.store.base_period_s) * 1000,
        durability: cli_config::durability(&config.store.durability)?,
        cardinality: config.cardinality.options(),
        ..StoreOptions::default()
    };
    check_volume(&config.store.data_dir, &options)?;
    let dir = config.store.data_dir.clone();
    let open_options = options.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&dir, open_options))
        .await
        .map_err(|e| format!("opening the store: {e}"))?
        .map_err(|e| {
            format!(
                "opening the store in {}: {e}",
                config.store.data_dir.display()
            )
        })?;
    let replay = store.replay_report();
    tracing::info!(
        records = replay.records,
        samples = replay.samples,
        dir = %config.store.data_dir.display(),
        "store open"
    );
    let store = Arc::new(store);
    alerts::start(&config, &store).await?;

    // Bind everything before announcing, so the printed addresses are live.
    let http_listener = bind_tcp(http_addr, "http").await?;
    let statsd_socket = match statsd_addr {
        Some(addr) => Some(
            tokio::net::UdpSocket::bind(addr)
                .await
                .map_err(|e| format!("listeners.statsd {addr}: {e}"))?,
        ),
        None => None,
    };
    let graphite_listener = bind_tcp(graphite_addr, "graphite").await?;
    let collectd_socket = match collectd_addr {
        Some(addr) => Some(
            tokio::net::UdpSocket::bind(addr)
                .await
                .map_err(|e| format!("listeners.collectd {addr}: {e}"))?,
        ),
        None => None,
    };
    let local = |r: Option<std::io::Result<SocketAddr>>| match r {
        None => "off".to_owned(),
        Some(Ok(a)) => a.to_string(),
        Some(Err(e)) => format!("unknown ({e})"),
    };
    let http_local = http_listener.as_ref().map(|l| l.local_addr());
    let http_loopback = matches!(&http_local, Some(Ok(a)) if a.ip().is_loopback());
    if let (Some(Ok(addr)), false, None) = (&http_local, http_loopback, &config.auth.token) {
        if !insecure_open {
            return Err(format!(
                "listeners.http {addr} is not a loopback address and auth.token is not set: \
                 every write, read and delete would be open to the network. Set auth.token \
                 (every request then needs Authorization: Bearer <token>), bind 127.0.0.1, or \
                 pass --insecure-open"
            ));
        }
        tracing::warn!(%addr, "HTTP open to the network without a token (--insecure-open)");
    }
    // statsd and Graphite carry no credentials at all: off loopback anyone who reaches the
    // port writes, whatever auth.token says.
    let exposed = [
        ("statsd", statsd_socket.as_ref().map(|s| s.local_addr())),
        (
            "graphite",
            graphite_listener.as_ref().map(|l| l.local_addr()),
        ),
        ("collectd", collectd_socket.as_ref().map(|s| s.local_addr())),
    ];
    for (name, local_addr) in exposed {
        let Some(Ok(addr)) = local_addr else { continue };
        if addr.ip().is_loopback() {
            continue;
        }
        if !insecure_open {
            return Err(format!(
                "listeners.{name} {addr} is not a loopback address: {name} has no \
                 authentication, so anyone who reaches the port could write. Bind 127.0.0.1 \
                 (or \"off\"), or pass --insecure-open"
            ));
        }
        tracing::warn!(%addr, listener = name, "open to the network without authentication (--insecure-open)");
    }
    let tls = match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => Some(conn::acceptor(cert, key)?),
        _ => None,
    };
    let bound =
        |r: Option<std::io::Result<SocketAddr>>| r.and_then(Result::ok).map(|a| a.to_string());
    let listening = Listening {
        http: bound(http_listener.as_ref().map(|l| l.local_addr())),
        statsd: bound(statsd_socket.as_ref().map(|s| s.local_addr())),
        graphite: bound(graphite_listener.as_ref().map(|l| l.local_addr())),
        collectd: bound(collectd_socket.as_ref().map(|s| s.local_addr())),
        tls: tls.is_some(),
    };
    let line = format!(
        "strata serve: listening http={} statsd={} graphite={} collectd={} tls={} data_dir={}",
        local(http_local),
        local(statsd_socket.as_ref().map(|s| s.local_addr())),
        local(graphite_listener.as_ref().map(|l| l.local_addr())),
        local(collectd_socket.as_ref().map(|s| s.local_addr())),
        if tls.is_some() { "on" } else { "off" },
        config.store.data_dir.display()
    );

    let statsd_inode = statsd_socket
        .as_ref()
        .and_then(|s| statsd::prepare_socket(s, config.statsd.receive_buffer_bytes, "statsd"));
    let collectd_inode = collectd_socket
        .as_ref()
        .and_then(|s| statsd::prepare_socket(s, config.collectd.receive_buffer_bytes, "collectd"));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let role = match cluster {
        Some((topology, node)) => {
            let role = start_cluster(&config, &options, topology, node, &mut tasks, &stop_rx);
            Some(Arc::new(role.await?))
        }
        None => None,
    };
    let mut app = new_app(&config, store.clone(), http_loopback, listening, role);
    app.statsd_inode = statsd_inode;
    app.collectd_inode = collectd_inode;
    let app: Shared = Arc::new(app);
    drop(store);
    let links = link::start(&app, link_listen, http::router(app.clone())).await?;
    tracing::info!("{links}");

    if let Some(listener) = http_listener {
        let router = http::router(app.clone());
        let stop = stop_rx.clone();
        let limits = conn::ConnLimits {
            connections_max: connection_budget.http,
            per_address_max: config.limits.connections_per_address_max,
            header_read_timeout: Duration::from_millis(config.limits.header_read_timeout_ms),
            request_timeout: Duration::from_millis(config.limits.request_timeout_ms),
        };
        let metrics = app.conn_metrics.clone();
        tasks.spawn(conn::serve(listener, tls, router, limits, metrics, stop));
    }
    if let Some(socket) = statsd_socket {
        tasks.spawn(statsd::run(app.clone(), socket, stop_rx.clone()));
    }
    if let Some(socket) = collectd_socket {
        tasks.spawn(collectd::run(app.clone(), socket, stop_rx.clone()));
    }
    if let Some(listener) = graphite_listener {
        let connections_max = connection_budget.graphite;
        tasks.spawn(graphite::run(
            app.clone(),
            listener,
            connections_max,
            stop_rx.clone(),
        ));
    }
    tasks.spawn(self_monitor(app.clone(), stop_rx.clone()));
    tasks.spawn(watch_background(app.clone(), stop_rx.clone()));

    // The handlers are in place before the start line: whoever reads it may signal at once.
    let signalled = shutdown_signal();
    // Once, on stdout, where scripts read it (the log on stderr would repeat it on a terminal).
    println!("{line}");
    signalled.await;
    tracing::info!("shutting down: no new connections; finishing requests and flushing buffers");
    let _ = stop_tx.send(true);
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined {
            tracing::error!(error = %e, "a listener task failed");
        }
    }
    alerts::stop().await;
    link::release();
    close_store(app).await
}

/// An `App` over `store` (the process's own, or one partition's on a storage node).
fn new_app(
    config: &Config,
    store: Arc<Store>,
    http_loopback: bool,
    listening: Listening,
    cluster: Option<Arc<clustered::ClusterRole>>,
) -> App {
    App {
        metadata: Arc::new(metadata::Registry::open(store.dir())),
        exemplars: Arc::new(exemplars::Exemplars::open(store.dir())),
        range_cache: match usize::try_from(config.limits.query_result_cache_bytes_max) {
            Ok(0) => None,
            Ok(bytes_max) => Some(Arc::new(promql::range_cache::RangeCache::new(bytes_max))),
            Err(_) => Some(Arc::new(promql::range_cache::RangeCache::new(usize::MAX))),
        },
        store,
        config: config.clone(),
        http_loopback,
        metrics: Metrics::new(),
        writers: Semaphore::new(WRITERS_MAX),
        request_slots: Semaphore::new(config.limits.http_concurrency_max),
        body_budget: Arc::new(budget::BodyBudget::new(config.limits.body_size_bytes_max)),
        query_budget: budget::QueryBudget::new(config.limits.query_memory_bytes_max),
        conn_metrics: Arc::new(conn::ConnMetrics::default()),
        statsd_inode: None,
        collectd_inode: None,
        series_ids: series_cache_from_env(),
        listening,
        cluster,
        otlp: config.otlp.translation(),
    }
}

/// This process's cluster roles: the front's producer (Kafka must answer), the storage node's
/// partition stores and their consumers (run as `tasks` until `stop`).
async fn start_cluster(
    config: &Config,
    options: &StoreOptions,
    topology: cluster::Topology,
    node: cluster::Node,
    tasks: &mut tokio::task::JoinSet<()>,
    stop: &watch::Receiver<bool>,
) -> Result<clustered::ClusterRole, String> {
    let client_id = format!("strata-{}", node.name);
    let front = if node.has(cluster::Role::Front) {
        let front = cluster::Front::connect(&topology, &client_id)
            .await
            .map_err(|e| format!("cluster front: {e}"))?;
        Some(front)
    } else {
        None
    };
    let storage = if node.has(cluster::Role::Storage) {
        let dir = config.store.data_dir.join("partitions");
        let token = config.auth.token.clone();
        let opened = cluster_ops::open_storage(&topology, &node.name, dir, options, token).await?;
        Some(Arc::new(opened))
    } else {
        None
    };
    let mut role = clustered::ClusterRole::new(
        topology.clone(),
        node.clone(),
        front,
        storage.clone(),
        now_ms(),
    )?;
    if let Some(storage) = storage {
        for (p, partition) in &storage.partitions {
            let app = new_app(
                config,
                partition.store.clone(),
                true,
                Listening::default(),
                None,
            );
            role.partition_apps.insert(*p, Arc::new(app));
        }
        tasks.spawn(cluster_ops::hand_off_leaving(
            storage.clone(),
            topology.clone(),
            node.side.clone(),
            config.auth.token.clone(),
            stop.clone(),
        ));
        let stop = stop.clone();
        tasks.spawn(async move {
            if let Err(e) = storage.run(&topology, &client_id, stop).await {
                tracing::error!(error = %e, "storage node stopped");
            }
        });
    }
    tracing::info!(node = %node.name, side = %node.side, "cluster node started");
    Ok(role)
}

/// Writes the self-monitoring histograms every base period, and once more at shutdown.
async fn self_monitor(app: Shared, mut stop: watch::Receiver<bool>) {
    let period = Duration::from_secs(u64::from(app.config.store.base_period_s));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = stopped(&mut stop) => true,
        };
        let batch = app.metrics.period_batch(now_ms());
        if let Err(e) = app.write(batch, SENDER_SERVER).await {
            tracing::warn!(error = %e, "writing self-monitoring failed");
        }
        if stopping {
            return;
        }
    }
}

/// Room a new store needs besides its first write-ahead log segment: the series index, the
/// manifest and the first blocks.
const NEW_STORE_ROOM_BYTES: u64 = 16 << 20;

/// Refuses to create a store on a volume too small for it (its write-ahead log segment is
/// preallocated whole, so a smaller volume fails on the first write with an error that does not
/// say why): one line naming the path, the free bytes and what is needed. An existing store
/// (its `wal` directory there) opens whatever is free: it already holds its segment.
fn check_volume(data_dir: &std::path::Path, options: &StoreOptions) -> Result<(), String> {
    if data_dir.join("wal").is_dir() {
        return Ok(());
    }
    // The data directory may not exist yet: the volume is that of its nearest existing parent.
    let Some(existing) = data_dir.ancestors().find(|p| p.exists()) else {
        return Ok(());
    };
    let Ok(stat) = rustix::fs::statvfs(existing) else {
        return Ok(());
    };
    let free_bytes = stat.f_bavail.saturating_mul(stat.f_frsize);
    let needed_bytes = options
        .wal_segment_size_bytes
        .saturating_add(NEW_STORE_ROOM_BYTES);
    if free_bytes >= needed_bytes {
        return Ok(());
    }
    Err(format!(
        "the volume of {} has {free_bytes} bytes free; a new store needs at least {needed_bytes} \
         ({} MiB write-ahead log segment, preallocated, and {} MiB for the index and first \
         blocks): free space there or choose another --data-dir",
        data_dir.display(),
        options.wal_segment_size_bytes >> 20,
        NEW_STORE_ROOM_BYTES >> 20
    ))
}

/// How often the store's background failures are looked at (and logged when new).
const BACKGROUND_WATCH_MS: u64 = 5_000;

/// Logs the store's background flush and maintenance failures as they happen: at most one line
/// per `BACKGROUND_WATCH_MS`, with how many failed since the last and the last error (also
/// counted in `/metrics`; a failing flush makes `/health` degraded).
async fn watch_background(app: Shared, mut stop: watch::Receiver<bool>) {
    let every = Duration::from_millis(BACKGROUND_WATCH_MS);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let mut seen = store::BackgroundFailures::default();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped(&mut stop) => return,
        }
        let now = app.store.background_failures();
        let flushes = now.flush_failures_total - seen.flush_failures_total;
        let passes = now.maintenance_failures_total - seen.maintenance_failures_total;
        if flushes + passes > 0 {
            let error = now.last_error.as_deref().unwrap_or("unknown");
            tracing::error!(
                failed_flushes = flushes,
                failed_maintenance = passes,
                error,
                "store: background work failed; acknowledged data stays in the write-ahead log \
                 and is retried"
            );
        } else if seen.flush_failing && !now.flush_failing {
            tracing::warn!("store: background flushes succeed again");
        }
        seen = now;
    }
}

/// Drops the last references and closes the store (WAL and index synced).
async fn close_store(app: Shared) -> Result<(), String> {
    let mut store = app.store.clone();
    drop(app);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(CLOSE_WAIT_MS_MAX);
    loop {
        match Arc::try_unwrap(store) {
            Ok(owned) => {
                return tokio::task::spawn_blocking(move || owned.close())
                    .await
                    .map_err(|e| format!("closing the store: {e}"))?
                    .map_err(|e| format!("closing the store: {e}"))
                    .map(|()| tracing::info!("store closed"));
            }
            Err(shared) => {
                if tokio::time::Instant::now() >= deadline {
                    // Everything acknowledged is already durable in the WAL; only the clean
                    // close is skipped.
                    tracing::warn!("store still referenced at shutdown; not closed cleanly");
                    return Ok(());
                }
                store = shared;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Resolves once shutdown has begun (the guard `wait_for` returns is dropped here, so callers'
/// futures stay `Send`).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// SIGTERM or SIGINT; the handlers are registered when this is called, not when awaited.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Binds a TCP listener unless the address is `off`; errors name the configuration key.
async fn bind_tcp(
    addr: Option<SocketAddr>,
    key: &str,
) -> Result<Option<tokio::net::TcpListener>, String> {
    match addr {
        Some(addr) => tokio::net::TcpListener::bind(addr)
            .await
            .map(Some)
            .map_err(|e| format!("listeners.{key} {addr}: {e}")),
        None => Ok(None),
    }
}
