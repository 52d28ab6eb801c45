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

use crate::agents::Agents;
use crate::forward::{forward_loop, forward_with, ForwardConfig, ForwardStats, Transport};
use crate::link::client::{self as link_client, Link, LinkConfig};
use crate::push::{Push, PushStats};
use crate::record::{Encoder, Origin, Value};
use crate::runs::{self, Job, RunStats};
use crate::sched::{SchedStats, Scheduler};
use crate::spool::{Spool, SpoolOptions};
use crate::tls;
use crate::{assigned, phases, state};

/// Checks one broker runs at most.
pub const CHECKS_MAX: usize = 100_000;
/// The broker's own health is journaled this often.
pub const HEALTH_PERIOD_MS_DEFAULT: u64 = 10_000;

#[derive(Clone, Debug)]
pub struct BrokerConfig {
    pub id: String,
    pub data_dir: PathBuf,
    /// Names of the cores this broker keeps data for (one journal subscriber each).
    pub cores: Vec<String>,
    /// Dial the core's link listener at this `host:port`…
    pub core_link: Option<String>,
    /// …through this HTTP CONNECT proxy (`http://host:port`).
    pub proxy: Option<String>,
    /// Wait for the core's link dials here.
    pub link_listen: Option<SocketAddr>,
    /// The core's link certificate fingerprint (SHA-256, hex), pinned on the link.
    pub core_sha256: String,
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
    /// Fetch the checks assigned to this broker from the core (`core_url` or the link), every
    /// `assigned::FETCH_PERIOD_MS`.
    pub checks_from_core: bool,
    /// The core's bearer token: sent with every forwarded record and checks fetch.
    pub core_token: Option<String>,
    /// How OTLP pushes' names and resource attributes become series (as the core's `[otlp]`).
    pub otlp: ingest::otlp::Translation,
    /// Accept links of agents in reverse mode here (`agents.rs`).
    pub agent_listen: Option<SocketAddr>,
    /// The bearer token the agent registry API requires (`None`: loopback clients only).
    pub agents_token: Option<String>,
}

impl BrokerConfig {
    pub fn new(id: &str, data_dir: &Path) -> BrokerConfig {
        BrokerConfig {
            id: id.to_owned(),
            data_dir: data_dir.to_owned(),
            cores: vec!["core".to_owned()],
            core_link: None,
            proxy: None,
            link_listen: None,
            core_sha256: String::new(),
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
            agent_listen: None,
            agents_token: None,
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
    pub agent_listen: Option<SocketAddr>,
}

struct Shared {
    id: String,
    data_dir: PathBuf,
    spool: Arc<Spool>,
    scheduler: Scheduler,
    local_checks: Vec<CheckSpec>,
    core_checks: Mutex<HashMap<String, Vec<CheckSpec>>>,
    phases: Mutex<HashMap<String, (u64, u64)>>,
    sched_stats: Arc<SchedStats>,
    run_stats: Arc<RunStats>,
    push_stats: Arc<PushStats>,
    forward_stats: Arc<ForwardStats>,
}

pub struct Broker {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
    /// Agents' links (their hub stops when this drops).
    _agents: Option<Agents>,
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
        let agents = match config.agent_listen {
            Some(listen) => Some(
                Agents::start(
                    &config.id,
                    &config.data_dir,
                    listen,
                    config.agents_token.clone(),
                    spool.clone(),
                    shared.push_stats.clone(),
                )
                .await?,
            ),
            None => None,
        };
        let mut bound = start_inputs(&config, &shared, agents.as_ref(), &mut tasks).await?;
        bound.agent_listen = agents.as_ref().and_then(Agents::listen);
        let core = config
            .cores
            .first()
            .cloned()
            .unwrap_or_else(|| "core".to_owned());
        let transport = match (&config.core_url, link_wanted(&config)) {
            (Some(_), true) => {
                return Err(
                    "--core-url and a link (--core-link, --link-listen) exclude each \
                            other: the journal goes one way"
                        .to_owned(),
                )
            }
            (Some(_), false) => None,
            (None, true) => {
                let (link, listen) = start_link(&config, &shared, &core, &mut tasks).await?;
                bound.listen = listen;
                Some(Transport::Link(link))
            }
            (None, false) => None,
        };
        let forward = ForwardConfig {
            url: config.core_url.clone().unwrap_or_else(|| "link".to_owned()),
            core: core.clone(),
            source: config.id.clone(),
            check: config.id.clone(),
            secret: config.core_secret.clone(),
            bearer: config.core_token.clone(),
        };
        let stats = shared.forward_stats.clone();
        match (&config.core_url, &transport) {
            (Some(_), _) => {
                tasks.spawn(forward_loop(spool.clone(), forward, stats));
            }
            (None, Some(t)) => {
                tasks.spawn(forward_with(spool.clone(), forward, stats, t.clone()));
            }
            (None, None) => {}
        }
        if config.checks_from_core {
            let fetch = match (&config.core_url, transport) {
                (Some(url), _) => Some(Fetch::Http(url.clone())),
                (None, Some(Transport::Link(link))) => Some(Fetch::Link(link)),
                _ => None,
            };
            if let Some(fetch) = fetch {
                tasks.spawn(fetch_assigned_loop(
                    shared.clone(),
                    fetch,
                    config.core_token.clone(),
                    core,
                ));
            }
        }
        Ok(Broker {
            shared,
            tasks,
            _agents: agents,
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
    agents: Option<&Agents>,
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
        let registry = agents.map(Agents::router);
        tasks.spawn(crate::push::serve_http(l, push.clone(), registry));
    }
    if let Some(addr) = config.statsd {
        let s = tokio::net::UdpSocket::bind(addr)
            .await
            .map_err(|e| format!("statsd listener {addr}: {e}"))?;
        bound.statsd = s.local_addr().ok();
        tasks.spawn(crate::push::serve_statsd(s, push.clone()));
    }
    if let Some(addr) = config.collectd {
        let s = tokio::net::UdpSocket::bind(addr)
            .await
            .map_err(|e| format!("collectd listener {addr}: {e}"))?;
        bound.collectd = s.local_addr().ok();
        tasks.spawn(crate::push::serve_collectd(s, push.clone()));
    }
    Ok(bound)
}

fn link_wanted(config: &BrokerConfig) -> bool {
    config.core_link.is_some() || config.link_listen.is_some()
}

/// Starts the TLS link to the core (dialled, accepted, or both): the broker's identity from
/// `strata broker init`, the core pinned by `--core-sha256`.
async fn start_link(
    config: &BrokerConfig,
    shared: &Arc<Shared>,
    core: &str,
    tasks: &mut JoinSet<()>,
) -> Result<(Link, Option<SocketAddr>), String> {
    let identity = tls::load(&config.data_dir, tls::LINK_STEM).map_err(|e| {
        format!(
            "{e} (run `strata broker init --dir {}` first)",
            config.data_dir.display()
        )
    })?;
    if config.core_sha256.is_empty() {
        return Err("a link needs --core-sha256 (the core prints it: strata broker list)".into());
    }
    let listen = match config.link_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("link listener {addr}: {e}"))?,
        ),
        None => None,
    };
    let bound = listen.as_ref().and_then(|l| l.local_addr().ok());
    let (spool, core) = (shared.spool.clone(), core.to_owned());
    let backlog: link_client::Backlog = Arc::new(move || {
        let checkpoint = spool.checkpoint(&core).unwrap_or(0);
        let records = spool.committed().saturating_sub(checkpoint);
        (records, spool.backlog_bytes(&core))
    });
    let link = link_client::start(
        LinkConfig {
            id: config.id.clone(),
            identity,
            core_sha256: config.core_sha256.clone(),
            dial: config.core_link.clone(),
            proxy: config.proxy.clone(),
            listen,
        },
        backlog,
        tasks,
    )?;
    Ok((link, bound))
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

impl Shared {
    /// Stores and schedules the checks a core assigns (replacing what it assigned before);
    /// how many were applied, and one message per spec refused.
    fn apply_checks(&self, core: &str, specs: Vec<CheckSpec>) -> (usize, Vec<String>) {
        let mut errors = Vec::new();
        let mut good = Vec::new();
        for spec in specs.into_iter().take(CHECKS_MAX) {
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
        lock(&self.core_checks).insert(core.to_owned(), good);
        self.replan();
        (n, errors)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the checks a core assigns are fetched from.
enum Fetch {
    /// The core's HTTP API at this base URL.
    Http(String),
    /// The TLS link.
    Link(Link),
}

impl Fetch {
    async fn get(
        &self,
        client: &reqwest::Client,
        path: &str,
        token: Option<&str>,
    ) -> Result<serde_json::Value, String> {
        match self {
            Fetch::Http(url) => {
                let mut request = client.get(format!("{}{path}", url.trim_end_matches('/')));
                if let Some(t) = token {
                    request = request.bearer_auth(t);
                }
                let r = request.send().await.map_err(|e| e.to_string())?;
                if !r.status().is_success() {
                    return Err(format!("HTTP {}", r.status().as_u16()));
                }
                let body = r.bytes().await.map_err(|e| e.to_string())?;
                serde_json::from_slice(&body).map_err(|e| e.to_string())
            }
            Fetch::Link(link) => {
                let mut headers = Vec::new();
                if let Some(t) = token {
                    headers.push(("authorization", format!("Bearer {t}")));
                }
                let request =
                    crate::link::h2::request(hyper::Method::GET, path, &headers, Vec::new())?;
                let (status, _, body) = link.call(request, crate::link::RESPONSE_BYTES_MAX).await?;
                if status != 200 {
                    return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)));
                }
                serde_json::from_slice(&body).map_err(|e| e.to_string())
            }
        }
    }
}

/// Asks the core's checks API for this broker's checks and applies them when they changed (the
/// same path as checks pushed over the link: validated, saved, placed, scheduled). A core that
/// does not answer leaves the last applied checks running.
async fn fetch_assigned_loop(
    shared: Arc<Shared>,
    fetch: Fetch,
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
    let path = format!("/api/strata/v1/checks?broker={}", shared.id);
    let mut applied: Option<Vec<CheckSpec>> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(assigned::FETCH_PERIOD_MS));
    loop {
        tick.tick().await;
        let answer = match fetch.get(&client, &path, token.as_deref()).await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "fetching assigned checks");
                continue;
            }
        };
        let (specs, errors) = assigned::specs(&answer, CHECKS_MAX);
        for e in &errors {
            tracing::warn!(error = %e, "an assigned check was not used");
        }
        if applied.as_ref() == Some(&specs) {
            continue;
        }
        let (n, errors) = shared.apply_checks(&core, specs.clone());
        for e in &errors {
            tracing::warn!(error = %e, "an assigned check was refused");
        }
        tracing::info!(checks = n, "checks assigned by the core applied");
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
