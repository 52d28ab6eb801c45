//! `strata serve`: the HTTP API, the statsd and Graphite listeners, self-monitoring, and the
//! embedded store they all write to.
//!
//! Every write is acknowledged only after `Store::write` returned (durable at the configured
//! level). The store blocks (fsync), so writes run on tokio's blocking pool, at most
//! `WRITERS_MAX` at once; concurrent writers share the journal's group commit.

mod alerts;
mod conn;
mod graphite;
mod http;
mod httptrap;
mod idcache;
mod influx;
mod kept;
mod mapping;
mod metrics;
mod read;
mod remote_write;
mod statsd;
mod ui;
mod worksheets;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use store::key::Tag;
use store::{Store, StoreError, StoreOptions};
use tokio::sync::{watch, Semaphore};

use crate::cli_config::{self, Config, ServeArgs};
pub use mapping::Mapped;
pub use metrics::{Endpoint, Metrics};

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
    /// Request body bytes held at once, in KiB (`BODY_BUDGET_BODIES` × the body limit): a
    /// request takes its share (its `Content-Length`, or the whole limit when unknown) before
    /// reading, so many large bodies wait instead of exhausting memory.
    pub body_budget_kib: Semaphore,
    pub body_budget_kib_max: u32,
    /// Series ids by the bytes clients send for a series (Influx, remote write): this store's.
    pub series_ids: idcache::SeriesIds,
}

/// How many maximum-size bodies may be held at once.
pub const BODY_BUDGET_BODIES: u64 = 4;

pub type Shared = Arc<App>;

/// Receipt time in ms since the epoch, from the fast wall clock.
pub fn now_ms() -> i64 {
    (clock::wall() / 1_000_000) as i64
}

/// Why an ingest did not reach the store.
#[derive(Debug)]
pub enum WriteError {
    /// The data itself is unacceptable (a kind clash that raced past the mapping, …): 400.
    Client(String),
    /// The store failed; the client may retry (503 for the journal, 500 otherwise).
    Store { retryable: bool, message: String },
    /// A body that does not decompress (400) or decompresses past the limit (413).
    Body { too_large: bool, message: String },
}

fn classify(e: &StoreError) -> WriteError {
    use store::IndexError;
    match e {
        StoreError::KindMismatchInBatch { .. }
        | StoreError::TextTooLong { .. }
        | StoreError::InvalidBins { .. }
        | StoreError::BatchTooLarge
        | StoreError::Index(IndexError::KindMismatch { .. })
        | StoreError::Index(IndexError::Key(_)) => WriteError::Client(e.to_string()),
        StoreError::Journal(_) | StoreError::Io(_) => WriteError::Store {
            retryable: true,
            message: e.to_string(),
        },
        _ => WriteError::Store {
            retryable: false,
            message: e.to_string(),
        },
    }
}

/// The body as sent, or gunzipped (with the body limit applied to the output) when `gzip`.
pub fn unzipped(
    body: &[u8],
    gzip: bool,
    size_bytes_max: u64,
) -> Result<std::borrow::Cow<'_, [u8]>, WriteError> {
    Ok(if gzip {
        std::borrow::Cow::Owned(gunzip(body, size_bytes_max)?)
    } else {
        std::borrow::Cow::Borrowed(body)
    })
}

/// gunzip with the body limit applied to the output.
pub fn gunzip(body: &[u8], size_bytes_max: u64) -> Result<Vec<u8>, WriteError> {
    use std::io::Read;
    let mut out = Vec::new();
    let mut reader = flate2::read::GzDecoder::new(body).take(size_bytes_max + 1);
    reader.read_to_end(&mut out).map_err(|e| WriteError::Body {
        too_large: false,
        message: format!("gzip body: {e}"),
    })?;
    if out.len() as u64 > size_bytes_max {
        return Err(WriteError::Body {
            too_large: true,
            message: format!("gzip body decompresses past the limit of {size_bytes_max} bytes"),
        });
    }
    Ok(out)
}

impl App {
    /// Writes a batch on the blocking pool and records its time.
    pub async fn write(self: &Arc<Self>, batch: store::WriteBatch) -> Result<(), WriteError> {
        if batch.is_empty() {
            return Ok(());
        }
        let _permit = self
            .writers
            .acquire()
            .await
            .map_err(|_| WriteError::Store {
                retryable: true,
                message: "shutting down".to_owned(),
            })?;
        let app = self.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let stopwatch = clock::Stopwatch::start();
            let result = app.store.write(&batch);
            app.metrics
                .store_write(stopwatch.elapsed_ns(), result.is_ok());
            result
        })
        .await;
        match joined {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "store write failed");
                Err(classify(&e))
            }
            Err(e) => Err(WriteError::Store {
                retryable: false,
                message: format!("writer task failed: {e}"),
            }),
        }
    }

    /// Writes what a body became (unless its parse stopped or nothing is left), turns the
    /// store's kind refusals into rejections, and counts it — every ingest path's last step.
    pub(crate) fn store_mapped(
        &self,
        endpoint: Endpoint,
        mapped: &mut Mapped,
    ) -> Result<(), WriteError> {
        if !mapped.stopped && !mapped.batch.is_empty() {
            let stopwatch = clock::Stopwatch::start();
            let result = self.store.write_partial(&mapped.batch);
            self.metrics
                .store_write(stopwatch.elapsed_ns(), result.is_ok());
            match result {
                Ok((_, rejected)) => mapping::apply_kind_rejections(mapped, &rejected),
                Err(e) => {
                    tracing::warn!(error = %e, endpoint = endpoint.name(), "store write failed");
                    return Err(classify(&e));
                }
            }
        }
        self.metrics
            .batch(endpoint, mapped.accepted, mapped.rejected_total);
        Ok(())
    }

    /// Decompresses (gzip), parses, maps and writes one body; returns what it became. A body
    /// whose parse stopped is not written at all.
    pub async fn ingest<F>(
        self: &Arc<Self>,
        endpoint: Endpoint,
        body: impl AsRef<[u8]> + Send + 'static,
        gzip: bool,
        extra_tags: Vec<Tag>,
        parse: F,
    ) -> Result<Mapped, WriteError>
    where
        F: FnOnce(&[u8], &ingest::Options) -> ingest::Batch + Send + 'static,
    {
        self.write_blocking(move |app| {
            let bytes = unzipped(body.as_ref(), gzip, app.config.limits.body_size_bytes_max)?;
            let now_ms = now_ms();
            let batch = parse(&bytes, &ingest::Options::at(now_ms));
            let mut mapped = mapping::map_batch(batch, now_ms, &extra_tags);
            app.store_mapped(endpoint, &mut mapped)?;
            Ok(mapped)
        })
        .await
    }

    /// Runs one body's write on the blocking pool, holding a writer permit (`writers` bounds the
    /// bodies being written at once); every ingest endpoint's body goes through here.
    pub async fn write_blocking<F>(self: &Arc<Self>, write: F) -> Result<Mapped, WriteError>
    where
        F: FnOnce(&App) -> Result<Mapped, WriteError> + Send + 'static,
    {
        let _permit = self
            .writers
            .acquire()
            .await
            .map_err(|_| WriteError::Store {
                retryable: true,
                message: "shutting down".to_owned(),
            })?;
        let app = self.clone();
        let joined = tokio::task::spawn_blocking(move || write(&app)).await;
        joined.unwrap_or_else(|e| {
            Err(WriteError::Store {
                retryable: false,
                message: format!("ingest task failed: {e}"),
            })
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
    // Transparent huge pages cost the server more than they give: the allocator hands freed
    // request and batch buffers back to the kernel in small pieces and takes them again, and
    // every fault in a huge-page region zeroes 2 MiB — 20–30 % of the server's CPU on histogram
    // ingest (bench/RESULTS.md, issue 6). Process-wide; an older kernel just keeps them.
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
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata serve: {e}");
            tracing::error!(error = %e, "strata serve stopped");
            ExitCode::from(1)
        }
    }
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

async fn serve(config: Config) -> Result<(), String> {
    let http_addr = cli_config::listener_addr("http", &config.listeners.http)?;
    let statsd_addr = cli_config::listener_addr("statsd", &config.listeners.statsd)?;
    let graphite_addr = cli_config::listener_addr("graphite", &config.listeners.graphite)?;
    let options = StoreOptions {
        base_period_ms: i64::from(config.store.base_period_s) * 1000,
        durability: cli_config::durability(&config.store.durability)?,
        ..StoreOptions::default()
    };
    let dir = config.store.data_dir.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&dir, options))
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
    let local = |r: Option<std::io::Result<SocketAddr>>| match r {
        None => "off".to_owned(),
        Some(Ok(a)) => a.to_string(),
        Some(Err(e)) => format!("unknown ({e})"),
    };
    let http_local = http_listener.as_ref().map(|l| l.local_addr());
    let http_loopback = matches!(&http_local, Some(Ok(a)) if a.ip().is_loopback());
    let tls = match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => Some(conn::acceptor(cert, key)?),
        _ => None,
    };
    let line = format!(
        "strata serve: listening http={} statsd={} graphite={} tls={} data_dir={}",
        local(http_local),
        local(statsd_socket.as_ref().map(|s| s.local_addr())),
        local(graphite_listener.as_ref().map(|l| l.local_addr())),
        if tls.is_some() { "on" } else { "off" },
        config.store.data_dir.display()
    );

    let body_budget_kib = u32::try_from(
        (config
            .limits
            .body_size_bytes_max
            .saturating_mul(BODY_BUDGET_BODIES)
            / 1024)
            .max(1),
    )
    .unwrap_or(u32::MAX)
    .min(Semaphore::MAX_PERMITS as u32);
    let app: Shared = Arc::new(App {
        store: store.clone(),
        config: config.clone(),
        http_loopback,
        metrics: Metrics::new(),
        writers: Semaphore::new(WRITERS_MAX),
        body_budget_kib: Semaphore::new(body_budget_kib as usize),
        body_budget_kib_max: body_budget_kib,
        series_ids: idcache::SeriesIds::from_env(),
    });
    drop(store);

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(listener) = http_listener {
        let router = http::router(app.clone());
        let stop = stop_rx.clone();
        tasks.spawn(conn::serve(listener, tls, router, stop));
    }
    if let Some(socket) = statsd_socket {
        tasks.spawn(statsd::run(app.clone(), socket, stop_rx.clone()));
    }
    if let Some(listener) = graphite_listener {
        tasks.spawn(graphite::run(app.clone(), listener, stop_rx.clone()));
    }
    tasks.spawn(self_monitor(app.clone(), stop_rx.clone()));

    println!("{line}");
    tracing::info!("{line}");
    shutdown_signal().await;
    tracing::info!("shutting down: no new connections; finishing requests and flushing buffers");
    let _ = stop_tx.send(true);
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined {
            tracing::error!(error = %e, "a listener task failed");
        }
    }
    alerts::stop().await;
    close_store(app).await
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
        if let Err(e) = app.write(batch).await {
            tracing::warn!(error = ?e, "writing self-monitoring failed");
        }
        if stopping {
            return;
        }
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

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
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
