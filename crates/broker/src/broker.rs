//! `strata broker`'s runtime: the journal, the scheduler and its runs, the push inputs, the
//! link (dialled out or accepted), and the broker's own health — all started by [`Broker::start`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use checks::CheckSpec;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use crate::forward::{forward_loop, ForwardConfig, ForwardStats};
use crate::link::serve::BrokerSide;
use crate::link::{ChecksApplied, ChecksPush};
use crate::push::{Push, PushStats};
use crate::record::{Encoder, Origin, Value};
use crate::runs::{self, Job, RunStats};
use crate::sched::{SchedStats, Scheduler};
use crate::spool::{Spool, SpoolOptions};
use crate::tls::{self, Identity};
use crate::{assigned, dial, phases, state};

/// Checks one broker runs at most.
pub const CHECKS_MAX: usize = 100_000;
/// The broker's own health is journaled this often.
pub const HEALTH_PERIOD_MS_DEFAULT: u64 = 10_000;
/// Redial backoff: from the first to the last, doubling.
const REDIAL_MS_MIN: u64 = 500;
const REDIAL_MS_MAX: u64 = 10_000;
/// Core dials accepted at once.
pub const CORE_CONNECTIONS_MAX: usize = 16;

#[derive(Clone, Debug)]
pub struct BrokerConfig {
    pub id: String,
    pub data_dir: PathBuf,
    /// Names of the cores this broker keeps data for (one journal subscriber each).
    pub cores: Vec<String>,
    /// Dial out to the core at this `host:port`…
    pub core_address: Option<String>,
    /// …through this HTTP CONNECT proxy.
    pub proxy: Option<String>,
    /// Accept the core's dials here.
    pub listen: Option<SocketAddr>,
    /// The core's certificate fingerprint (SHA-256, hex).
    pub core_fingerprint: String,
    /// Forward the journal to this core's HTTP ingest (`http://host:port`), exactly once.
    pub core_url: Option<String>,
    /// The core's httptrap secret, when it wants one.
    pub core_secret: Option<String>,
    pub push_http: Option<SocketAddr>,
    pub statsd: Option<SocketAddr>,
    pub collectd: Option<SocketAddr>,
    /// Checks defined locally (TOML, `[[check]]` tables).
    pub checks_file: Option<PathBuf>,
    pub runs_max: usize,
    pub spool: SpoolOptions,
    pub health_period_ms: u64,
    /// Fetch the checks assigned to this broker from `core_url`'s checks API, every
    /// `assigned::FETCH_PERIOD_MS`.
    pub checks_from_core: bool,
    /// The core's bearer token: sent with every forwarded record and checks fetch.
    pub core_token: Option<String>,
    /// How OTLP pushes' names and resource attributes become series (as the core's `[otlp]`).
    pub otlp: ingest::otlp::Translation,
}

impl BrokerConfig {
    pub fn new(id: &str, data_dir: &Path, core_fingerprint: &str) -> BrokerConfig {
        BrokerConfig {
            id: id.to_owned(),
            data_dir: data_dir.to_owned(),
            cores: vec!["core".to_owned()],
            core_address: None,
            proxy: None,
            listen: None,
            core_fingerprint: core_fingerprint.to_owned(),
            core_url: None,
            core_secret: None,
            push_http: None,
            statsd: None,
            collectd: None,
            checks_file: None,
            runs_max: runs::RUNS_MAX_DEFAULT,
            spool: SpoolOptions::default(),
            health_period_ms: HEALTH_PERIOD_MS_DEFAULT,
            checks_from_core: false,
            core_token: None,
            otlp: ingest::otlp::Translation::default(),
        }
    }
}

/// The addresses actually bound (port 0 resolved).
#[derive(Clone, Debug, Default)]
pub struct Bound {
    pub listen: Option<SocketAddr>,
    pub push_http: Option<SocketAddr>,
    pub statsd: Option<SocketAddr>,
    pub collectd: Option<SocketAddr>,
}

struct Shared {
    id: String,
    data_dir: PathBuf,
    spool: Arc<Spool>,
    scheduler: Scheduler,
    local_checks: Vec<CheckSpec>,
    core_checks: Mutex<HashMap<String, Vec<CheckSpec>>>,
    phases: Mutex<HashMap<String, (u64, u64)>>,
    contacts: Mutex<HashMap<String, u64>>,
    sched_stats: Arc<SchedStats>,
    run_stats: Arc<RunStats>,
    push_stats: Arc<PushStats>,
    forward_stats: Arc<ForwardStats>,
}

pub struct Broker {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
    pub bound: Bound,
}

fn now_ms() -> u64 {
    clock::wall() / 1_000_000
}

impl Broker {
    /// Opens the journal, binds every listener, and starts everything. Must be called inside a
    /// tokio runtime.
    pub async fn start(config: BrokerConfig) -> Result<Broker, String> {
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| format!("data directory {}: {e}", config.data_dir.display()))?;
        let spool = Arc::new(Spool::open(
            &config.data_dir,
            &config.cores,
            config.spool.clone(),
        )?);
        let local_checks = match &config.checks_file {
            Some(p) => load_local_checks(p)?,
            None => Vec::new(),
        };
        let (job_tx, job_rx) = mpsc::channel::<Job>(runs::JOB_QUEUE_MAX);
        let scheduler = Scheduler::start(Box::new(move |entry, due_ms| {
            job_tx
                .try_send(Job {
                    entry: entry.clone(),
                    due_ms,
                })
                .is_ok()
        }))?;
        let shared = Arc::new(Shared {
            id: config.id.clone(),
            data_dir: config.data_dir.clone(),
            sched_stats: scheduler.stats(),
            scheduler,
            spool: spool.clone(),
            local_checks,
            core_checks: Mutex::new(load_core_checks(&config.data_dir, &config.cores)),
            phases: Mutex::new(
                state::load_json(&config.data_dir.join("phases.json"))?.unwrap_or_default(),
            ),
            contacts: Mutex::new(HashMap::new()),
            run_stats: Arc::new(RunStats::default()),
            push_stats: Arc::new(PushStats::default()),
            forward_stats: Arc::new(ForwardStats::default()),
        });
        shared.replan();
        let mut tasks = JoinSet::new();
        let (run_tx, run_rx) = mpsc::channel(runs::RUN_QUEUE_MAX);
        let permits = Arc::new(Semaphore::new(config.runs_max.max(1)));
        tasks.spawn(runs::runner(
            job_rx,
            permits,
            run_tx,
            shared.run_stats.clone(),
        ));
        tasks.spawn(runs::writer(
            run_rx,
            spool.clone(),
            Origin::Checks,
            shared.run_stats.clone(),
        ));
        tasks.spawn(spool.clone().budget_loop(Duration::from_secs(5)));
        tasks.spawn(health_loop(
            shared.clone(),
            config.health_period_ms,
            config.cores.clone(),
        ));
        let bound = start_inputs(&config, &shared, &mut tasks).await?;
        if let Some(url) = &config.core_url {
            let forward = ForwardConfig {
                url: url.clone(),
                core: config
                    .cores
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "core".to_owned()),
                source: config.id.clone(),
                check: config.id.clone(),
                secret: config.core_secret.clone(),
                bearer: config.core_token.clone(),
            };
            tasks.spawn(forward_loop(
                spool.clone(),
                forward,
                shared.forward_stats.clone(),
            ));
            if config.checks_from_core {
                tasks.spawn(fetch_assigned_loop(
                    shared.clone(),
                    url.clone(),
                    config.core_token.clone(),
                    config
                        .cores
                        .first()
                        .cloned()
                        .unwrap_or_else(|| "core".to_owned()),
                ));
            }
        }
        let bound = if config.core_address.is_some() || config.listen.is_some() {
            // The TLS link is only for a broker that has an identity.
            let identity = tls::load(&config.data_dir, "broker")
                .map_err(|e| format!("{e} (run `strata broker init` first)"))?;
            start_link(&config, &identity, &shared, &mut tasks, bound).await?
        } else {
            bound
        };
        Ok(Broker {
            shared,
            tasks,
            bound,
        })
    }

    pub fn spool(&self) -> &Arc<Spool> {
        &self.shared.spool
    }

    pub fn forward_stats(&self) -> Arc<ForwardStats> {
        self.shared.forward_stats.clone()
    }

    pub fn sched_stats(&self) -> Arc<SchedStats> {
        self.shared.sched_stats.clone()
    }

    /// Checks scheduled now.
    pub fn check_count(&self) -> usize {
        self.shared.scheduler.len()
    }

    /// Stops every task (the journal closes when the last reference goes).
    pub async fn stop(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

async fn start_inputs(
    config: &BrokerConfig,
    shared: &Arc<Shared>,
    tasks: &mut JoinSet<()>,
) -> Result<Bound, String> {
    let push = Push {
        spool: shared.spool.clone(),
        stats: shared.push_stats.clone(),
        otlp: Arc::new(config.otlp.clone()),
    };
    let mut bound = Bound::default();
    if let Some(addr) = config.push_http {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("push listener {addr}: {e}"))?;
        bound.push_http = l.local_addr().ok();
        tasks.spawn(crate::push::serve_http(l, push.clone()));
    }
    if let Some(addr) = config.statsd {
        let s = tokio::net::UdpSocket::bind(addr)
            .await
            .map_err(|e| format!("statsd listener {addr}: {e}"))?;
        bound.statsd = s.local_addr().ok();
        tasks.spawn(crate::push::serve_statsd(s, push.clone()));
    }
    Ok(bound)
}

async fn start_link(
    config: &BrokerConfig,
    identity: &Identity,
    shared: &Arc<Shared>,
    tasks: &mut JoinSet<()>,
    mut bound: Bound,
) -> Result<Bound, String> {
    let pins = tls::pin_one(&config.core_fingerprint);
    let side: Arc<dyn BrokerSide> = shared.clone();
    if let Some(address) = &config.core_address {
        let tls = tls::client_config(identity, pins.clone())?;
        tasks.spawn(dial_loop(
            address.clone(),
            config.proxy.clone(),
            tls,
            side.clone(),
        ));
    }
    if let Some(addr) = config.listen {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("link listener {addr}: {e}"))?;
        bound.listen = l.local_addr().ok();
        let tls = tls::server_config(identity, pins)?;
        tasks.spawn(accept_loop(l, tls, side));
    }
    Ok(bound)
}

/// Dials the core and serves the link on the connection, again and again, with backoff.
async fn dial_loop(
    address: String,
    proxy: Option<String>,
    tls: Arc<tokio_rustls::rustls::ClientConfig>,
    side: Arc<dyn BrokerSide>,
) {
    let connector = tokio_rustls::TlsConnector::from(tls);
    let mut backoff = REDIAL_MS_MIN;
    loop {
        match dial_once(&address, proxy.as_deref(), &connector).await {
            Ok(stream) => {
                backoff = REDIAL_MS_MIN;
                tracing::info!(core = %address, "link up (the broker dialled)");
                if let Err(e) = crate::link::serve::serve(stream, side.clone()).await {
                    tracing::info!(core = %address, error = %e, "link down");
                }
            }
            Err(e) => tracing::warn!(core = %address, error = %e, "dialling the core"),
        }
        let jitter = now_ms() % (backoff / 4 + 1);
        tokio::time::sleep(Duration::from_millis(backoff + jitter)).await;
        backoff = (backoff * 2).min(REDIAL_MS_MAX);
    }
}

async fn dial_once(
    address: &str,
    proxy: Option<&str>,
    connector: &tokio_rustls::TlsConnector,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = dial::connect(address, proxy).await?;
    let name = tls::server_name()?;
    tokio::time::timeout(dial::CONNECT_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| "TLS handshake timed out".to_owned())?
        .map_err(|e| format!("TLS handshake: {e}"))
}

/// Accepts the core's dials (at most `CORE_CONNECTIONS_MAX` at once).
async fn accept_loop(
    listener: tokio::net::TcpListener,
    tls: Arc<tokio_rustls::rustls::ServerConfig>,
    side: Arc<dyn BrokerSide>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let permits = Arc::new(Semaphore::new(CORE_CONNECTIONS_MAX));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let Ok((tcp, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let side = side.clone();
        tokio::spawn(async move {
            let tls = tokio::time::timeout(dial::CONNECT_TIMEOUT, acceptor.accept(tcp)).await;
            match tls {
                Ok(Ok(stream)) => {
                    tracing::info!(%peer, "link up (the core dialled)");
                    if let Err(e) = crate::link::serve::serve(stream, side).await {
                        tracing::info!(%peer, error = %e, "link down");
                    }
                }
                Ok(Err(e)) => tracing::warn!(%peer, error = %e, "link TLS handshake"),
                Err(_) => tracing::warn!(%peer, "link TLS handshake timed out"),
            }
            drop(permit);
        });
    }
}

impl Shared {
    /// Every check (local first, then each core's), placed and handed to the scheduler.
    fn replan(&self) {
        let mut all: Vec<CheckSpec> = self.local_checks.clone();
        {
            let by_core = self.core_checks.lock().unwrap_or_else(|e| e.into_inner());
            let mut cores: Vec<&String> = by_core.keys().collect();
            cores.sort();
            for c in cores {
                all.extend(by_core[c].iter().cloned());
            }
        }
        let mut seen = std::collections::HashSet::new();
        all.retain(|s| seen.insert(s.id.clone()));
        all.truncate(CHECKS_MAX);
        let wanted: Vec<(String, u64)> = all.iter().map(|s| (s.id.clone(), s.period_ms)).collect();
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        if phases::place_all(&wanted, &mut phases) {
            if let Err(e) = state::save_json(&self.data_dir.join("phases.json"), &*phases) {
                tracing::warn!(error = %e, "saving check phases");
            }
        }
        let plan = all
            .into_iter()
            .map(|s| {
                let phase = phases.get(&s.id).map_or(0, |p| p.1);
                (Arc::new(s), phase)
            })
            .collect();
        drop(phases);
        self.scheduler.set(plan);
    }
}

impl BrokerSide for Shared {
    fn id(&self) -> &str {
        &self.id
    }

    fn spool(&self) -> &Arc<Spool> {
        &self.spool
    }

    fn apply_checks(&self, core: &str, push: ChecksPush) -> ChecksApplied {
        let mut errors = Vec::new();
        let mut good = Vec::new();
        for spec in push.checks.into_iter().take(CHECKS_MAX) {
            match checks::validate(&spec) {
                Ok(()) => good.push(spec),
                Err(e) => errors.push(format!("{}: {e}", spec.id)),
            }
        }
        let path = core_checks_path(&self.data_dir, core);
        if let Err(e) = state::save_json(&path, &good) {
            errors.push(format!("saving {}: {e}", path.display()));
        }
        let n = good.len();
        {
            let mut by_core = self.core_checks.lock().unwrap_or_else(|e| e.into_inner());
            by_core.insert(core.to_owned(), good);
        }
        self.replan();
        ChecksApplied { checks: n, errors }
    }

    fn core_contact(&self, core: &str, _up: bool) {
        let mut c = self.contacts.lock().unwrap_or_else(|e| e.into_inner());
        c.insert(core.to_owned(), now_ms());
    }
}

/// Asks the core's checks API for this broker's checks and applies them when they changed (the
/// same path as checks pushed over the link: validated, saved, placed, scheduled). A core that
/// does not answer leaves the last applied checks running.
async fn fetch_assigned_loop(
    shared: Arc<Shared>,
    url: String,
    token: Option<String>,
    core: String,
) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_millis(assigned::FETCH_PERIOD_MS * 5))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "no HTTP client: checks are not fetched from the core");
            return;
        }
    };
    let path = format!(
        "{}/api/strata/v1/checks?broker={}",
        url.trim_end_matches('/'),
        shared.id
    );
    let mut applied: Option<Vec<CheckSpec>> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(assigned::FETCH_PERIOD_MS));
    loop {
        tick.tick().await;
        let mut request = client.get(&path);
        if let Some(t) = &token {
            request = request.bearer_auth(t);
        }
        let answer = match request.send().await {
            Ok(r) if r.status().is_success() => r.json::<serde_json::Value>().await,
            Ok(r) => {
                tracing::warn!(status = r.status().as_u16(), "fetching assigned checks");
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "fetching assigned checks");
                continue;
            }
        };
        let Ok(answer) = answer else { continue };
        let (specs, errors) = assigned::specs(&answer, CHECKS_MAX);
        for e in &errors {
            tracing::warn!(error = %e, "an assigned check was not used");
        }
        if applied.as_ref() == Some(&specs) {
            continue;
        }
        let done = shared.apply_checks(
            &core,
            ChecksPush {
                checks: specs.clone(),
            },
        );
        tracing::info!(checks = done.checks, "checks assigned by the core applied");
        applied = Some(specs);
    }
}

fn core_checks_path(dir: &Path, core: &str) -> PathBuf {
    dir.join(format!("checks-{core}.json"))
}

fn load_core_checks(dir: &Path, cores: &[String]) -> HashMap<String, Vec<CheckSpec>> {
    let mut out = HashMap::new();
    for core in cores {
        match state::load_json::<Vec<CheckSpec>>(&core_checks_path(dir, core)) {
            Ok(Some(list)) => {
                out.insert(core.clone(), list);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "the checks a core assigned could not be read"),
        }
    }
    out
}

/// A local checks file: `[[check]]` tables, each a spec. Bad specs are skipped and named.
pub fn load_local_checks(path: &Path) -> Result<Vec<CheckSpec>, String> {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        check: Vec<CheckSpec>,
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: File = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for spec in file.check {
        match checks::validate(&spec) {
            Ok(()) => out.push(spec),
            Err(e) => tracing::warn!(check = %spec.id, error = %e, "check skipped"),
        }
    }
    Ok(out)
}

/// Journals the broker's own health every `period_ms`, like any data.
async fn health_loop(shared: Arc<Shared>, period_ms: u64, cores: Vec<String>) {
    let mut tick = tokio::time::interval(Duration::from_millis(period_ms.max(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = now_ms();
        let ts = (now - now % period_ms.max(1)) as i64;
        let enc = health_record(&shared, &cores, ts, now as i64);
        if let Err(e) = shared.spool.append(enc.finish()).await {
            tracing::warn!(error = %e, "health not journaled");
        }
    }
}

fn health_record(shared: &Shared, cores: &[String], ts: i64, now: i64) -> Encoder {
    let tags = vec![("broker".to_owned(), shared.id.clone())];
    let mut enc = Encoder::new(Origin::Health, now);
    let num = |enc: &mut Encoder, name: &str, extra: &[(String, String)], v: u64| {
        let mut t = tags.clone();
        t.extend_from_slice(extra);
        enc.push(
            name,
            &t,
            ts,
            &Value::Numeric(v as f64),
            crate::record::Mode::Set,
        );
    };
    let s = &shared.sched_stats;
    num(
        &mut enc,
        "broker_runs_fired",
        &[],
        s.fired.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_runs_late",
        &[],
        s.late.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_runs_skipped",
        &[],
        s.skipped.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_checks",
        &[],
        shared.scheduler.len() as u64,
    );
    let by_kind = shared
        .run_stats
        .by_kind
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for (kind, (runs, failed)) in by_kind {
        let t = [("kind".to_owned(), kind)];
        num(&mut enc, "broker_runs", &t, runs);
        num(&mut enc, "broker_run_errors", &t, failed);
    }
    let c = &shared.spool.counters;
    num(
        &mut enc,
        "broker_journal_records",
        &[],
        c.records.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_dropped_records",
        &[],
        c.dropped_records.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_lost_records",
        &[],
        c.lost_records.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_journal_disk_bytes",
        &[],
        shared.spool.disk().0,
    );
    for core in cores {
        let t = [("core".to_owned(), core.clone())];
        num(
            &mut enc,
            "broker_backlog_bytes",
            &t,
            shared.spool.backlog_bytes(core),
        );
        let cp = shared.spool.checkpoint(core).unwrap_or(0);
        let backlog = shared.spool.committed().saturating_sub(cp);
        num(&mut enc, "broker_backlog_records", &t, backlog);
    }
    let f = &shared.forward_stats;
    num(
        &mut enc,
        "broker_forward_applied",
        &[],
        f.applied.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_forward_duplicates",
        &[],
        f.duplicates.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_forward_refused",
        &[],
        f.refused.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_forward_retries",
        &[],
        f.retries.load(Ordering::Relaxed),
    );
    let p = &shared.push_stats;
    num(
        &mut enc,
        "broker_push_accepted",
        &[],
        p.accepted.load(Ordering::Relaxed),
    );
    num(
        &mut enc,
        "broker_push_rejected",
        &[],
        p.rejected.load(Ordering::Relaxed),
    );
    let lateness = s.take_lateness();
    if !lateness.is_empty() {
        enc.push(
            "broker_fire_lateness",
            &tags,
            ts,
            &Value::Histogram(lateness),
            crate::record::Mode::Set,
        );
    }
    enc
}
