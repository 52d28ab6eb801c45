//! The agent's runtime: the collector ticking every second, a period's samples made at each
//! period's end, plugins started once a period, the local inputs (statsd, `/write`), and the way
//! out — push (each period one record in the local journal, forwarded exactly once by the
//! broker's forwarder) or pull (the latest period served over HTTP).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use broker::forward::{ForwardConfig, ForwardStats};
use broker::record::{self, Encoder, Mode, Origin, Sample, Value};
use broker::spool::{Spool, SpoolOptions};

use crate::collect::{Collector, Out};
use crate::config::{self, Config};
use crate::plugins::Plugins;
use crate::{expose, kernel};

/// The default period: samples are made (and pushed) this often.
pub const PERIOD_S_DEFAULT: u64 = 10;
/// The local journal: small segments, and a small budget past which the oldest is dropped
/// (counted) — hours of an agent's own data, not days.
pub const JOURNAL_SEGMENT_BYTES: u64 = 1 << 20;
pub const JOURNAL_BYTES_MAX: u64 = 64 << 20;
pub const JOURNAL_AGE_MS_MAX: u64 = 7 * 24 * 3600 * 1000;
/// Longest `/write` body.
pub const WRITE_BODY_BYTES_MAX: usize = 4 << 20;
/// Histogram streams kept as running totals for `/metrics`, at most.
pub const TOTALS_MAX: usize = 10_000;
/// Pushed samples held for the next period in pull mode, at most (more are refused, counted).
pub const PENDING_SAMPLES_MAX: usize = 100_000;
/// Longest statsd datagram; statsd is gathered this long into one record.
pub const DATAGRAM_BYTES_MAX: usize = 65_535;
pub const STATSD_FLUSH_MS: u64 = 1_000;
/// The subscriber name of the core in the local journal.
const CORE: &str = "core";

/// What the listeners bound (port 0 becomes a real port).
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    pub http: Option<SocketAddr>,
    pub statsd: Option<SocketAddr>,
}

#[derive(Default)]
struct Counters {
    periods: AtomicU64,
    pushed_samples: AtomicU64,
    pushed_rejected: AtomicU64,
    journal_failures: AtomicU64,
}

/// A stream: its name and tags as given.
type StreamId = (String, Vec<(String, String)>);

struct Shared {
    host: String,
    spool: Option<Arc<Spool>>,
    forward: Arc<ForwardStats>,
    /// The latest period's samples (what pull mode serves).
    latest: Mutex<Arc<Vec<Sample>>>,
    /// What `/metrics` serves: the latest numbers, and histograms as running totals.
    exposed: Mutex<Arc<Vec<Sample>>>,
    totals: Mutex<BTreeMap<StreamId, hist::Histogram>>,
    /// Pushed samples waiting for the next period (pull mode), combined per stream.
    pending: Mutex<BTreeMap<StreamId, Sample>>,
    counters: Counters,
}

fn now_ms() -> i64 {
    (clock::wall() / 1_000_000) as i64
}

fn with_host(host: &str, mut s: Sample) -> Sample {
    if !s.tags.iter().any(|(c, _)| c == "host") {
        s.tags.insert(0, ("host".to_owned(), host.to_owned()));
    }
    s
}

impl Shared {
    /// Takes pushed samples: into the journal (push mode; `Err` when they are not durable) or
    /// into the next period (pull mode).
    async fn take(&self, origin: Origin, samples: Vec<Sample>) -> Result<(), String> {
        if samples.is_empty() {
            return Ok(());
        }
        let n = samples.len() as u64;
        if let Some(spool) = &self.spool {
            let mut enc = Encoder::new(origin, now_ms());
            for s in samples {
                enc.push_sample(&with_host(&self.host, s));
            }
            spool.append(enc.finish()).await.inspect_err(|_| {
                self.counters
                    .journal_failures
                    .fetch_add(1, Ordering::Relaxed);
            })?;
        } else {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            for s in samples {
                let s = with_host(&self.host, s);
                let key = (s.name.clone(), s.tags.clone());
                let full = pending.len() >= PENDING_SAMPLES_MAX;
                match pending.get_mut(&key) {
                    Some(held) => combine(held, s),
                    None if !full => {
                        pending.insert(key, s);
                    }
                    None => return Err(format!("more than {PENDING_SAMPLES_MAX} pushed streams")),
                }
            }
        }
        self.counters.pushed_samples.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// The period's samples as Prometheus wants them: each histogram merged into its running
    /// total since the agent started (a scraper differences them, as any counter).
    fn expose(&self, samples: &[Sample]) -> Vec<Sample> {
        let mut totals = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(samples.len());
        for s in samples {
            let Value::Histogram(h) = &s.value else {
                out.push(s.clone());
                continue;
            };
            let key = (s.name.clone(), s.tags.clone());
            if !totals.contains_key(&key) && totals.len() >= TOTALS_MAX {
                continue;
            }
            let total = totals.entry(key).or_default();
            total.merge(h);
            out.push(Sample {
                value: Value::Histogram(total.clone()),
                ..s.clone()
            });
        }
        out
    }

    /// The agent's own state, as samples.
    fn own(&self, out: &mut Out) {
        let tags = vec![("host".to_owned(), self.host.clone())];
        let backlog = self.spool.as_ref().map_or(0, |s| s.backlog_bytes(CORE));
        out.num("agent_backlog_bytes", tags.clone(), backlog as f64);
        let f = &self.forward;
        let c = &self.counters;
        for (name, v) in [
            (
                "agent_forward_applied_total",
                f.applied.load(Ordering::Relaxed),
            ),
            (
                "agent_forward_duplicates_total",
                f.duplicates.load(Ordering::Relaxed),
            ),
            (
                "agent_forward_retries_total",
                f.retries.load(Ordering::Relaxed),
            ),
            (
                "agent_forward_refused_total",
                f.refused.load(Ordering::Relaxed),
            ),
            (
                "agent_pushed_samples_total",
                c.pushed_samples.load(Ordering::Relaxed),
            ),
            (
                "agent_pushed_rejected_total",
                c.pushed_rejected.load(Ordering::Relaxed),
            ),
            (
                "agent_journal_failures_total",
                c.journal_failures.load(Ordering::Relaxed),
            ),
        ] {
            out.num(name, tags.clone(), v as f64);
        }
        if let Some(spool) = &self.spool {
            let dropped = spool.counters.dropped_records.load(Ordering::Relaxed);
            out.num(
                "agent_journal_dropped_records_total",
                tags.clone(),
                dropped as f64,
            );
        }
        let status = kernel::read(std::path::Path::new("/proc/self/status")).unwrap_or_default();
        if let Some(kb) = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_ascii_whitespace().next()?.parse::<u64>().ok())
        {
            out.num("agent_rss_bytes", tags.clone(), (kb * 1024) as f64);
        }
        let stat = kernel::read(std::path::Path::new("/proc/self/stat")).unwrap_or_default();
        if let Some(cpu) = self_cpu_seconds(&stat) {
            out.num("agent_cpu_seconds_total", tags, cpu);
        }
    }
}

/// utime + stime of a /proc/<pid>/stat line, in seconds (fields after the `(comm)`).
pub fn self_cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / kernel::USER_HZ)
}

/// Combines a pushed sample into the one held for its stream this period (as the core would
/// within one body).
fn combine(held: &mut Sample, s: Sample) {
    match (&mut held.value, s.value, s.mode) {
        (Value::Numeric(a), Value::Numeric(b), Mode::Accumulate) => *a += b,
        (Value::Histogram(a), Value::Histogram(b), _) => a.merge(&b),
        (_, v, _) => {
            held.value = v;
            held.mode = s.mode;
        }
    }
}

/// Runs the agent until `stop` resolves. `ready` is told what was bound once everything is up.
pub async fn run(
    config: Config,
    period: Duration,
    ready: impl FnOnce(Bound),
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    assert!(period >= Duration::from_secs(1));
    std::fs::create_dir_all(&config.state_dir)
        .map_err(|e| format!("state_dir {}: {e}", config.state_dir.display()))?;
    let mut tasks = tokio::task::JoinSet::new();
    let forward = Arc::new(ForwardStats::default());
    let spool = match config.mode {
        config::Mode::Push => Some(start_push(&config, &forward, &mut tasks)?),
        config::Mode::Pull => None,
        config::Mode::Reverse => {
            return Err("mode = \"reverse\" is not built yet; use push or pull".to_owned())
        }
    };
    let shared = Arc::new(Shared {
        host: config.host_id.clone(),
        spool,
        forward,
        latest: Mutex::new(Arc::new(Vec::new())),
        exposed: Mutex::new(Arc::new(Vec::new())),
        totals: Mutex::new(BTreeMap::new()),
        pending: Mutex::new(BTreeMap::new()),
        counters: Counters::default(),
    });
    let mut bound = Bound {
        http: None,
        statsd: None,
    };
    if let Some(addr) = config.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("listen {addr}: {e}"))?;
        bound.http = listener.local_addr().ok();
        let router = router(shared.clone());
        tasks.spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "the HTTP listener stopped");
            }
        });
    }
    if let Some(addr) = config.statsd {
        let socket = tokio::net::UdpSocket::bind(addr)
            .await
            .map_err(|e| format!("statsd {addr}: {e}"))?;
        bound.statsd = socket.local_addr().ok();
        tasks.spawn(statsd_loop(socket, shared.clone()));
    }
    let plugins = Plugins::new(config.plugins_dir.clone(), period, config.plugins.clone());
    tasks.spawn(collect_loop(shared, plugins, period));
    ready(bound);
    stop.await;
    tasks.shutdown().await;
    Ok(())
}

fn start_push(
    config: &Config,
    forward: &Arc<ForwardStats>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<Arc<Spool>, String> {
    let push = config
        .push
        .as_ref()
        .ok_or("mode = \"push\" needs a [push] table")?;
    let opts = SpoolOptions {
        segment_bytes: JOURNAL_SEGMENT_BYTES,
        disk_bytes_max: JOURNAL_BYTES_MAX,
        disk_age_ms_max: JOURNAL_AGE_MS_MAX,
    };
    let spool = Arc::new(Spool::open(&config.state_dir, &[CORE.to_owned()], opts)?);
    let name = format!("agent-{}", config.host_id);
    let forward_config = ForwardConfig {
        url: push.url.clone(),
        core: CORE.to_owned(),
        source: name.clone(),
        check: name,
        secret: None,
        bearer: config.token()?,
    };
    tasks.spawn(spool.clone().budget_loop(Duration::from_secs(5)));
    tasks.spawn(broker::forward::forward_loop(
        spool.clone(),
        forward_config,
        forward.clone(),
    ));
    Ok(spool)
}

/// The next period end after `now_ms`, on the wall-clock grid of the period.
fn next_end(now_ms: i64, period_ms: i64) -> i64 {
    (now_ms / period_ms + 1) * period_ms
}

async fn collect_loop(shared: Arc<Shared>, plugins: Plugins, period: Duration) {
    let period_ms = period.as_millis() as i64;
    let mut collector = Collector::new(&shared.host);
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut end = next_end(now_ms(), period_ms);
    plugins.start_runs();
    loop {
        ticker.tick().await;
        collector.tick();
        let now = now_ms();
        if now < end {
            continue;
        }
        let mut out = Out {
            ts_ms: end,
            samples: collector.emit(end),
        };
        plugins.emit(&shared.host, &mut out);
        shared.own(&mut out);
        end = next_end(now, period_ms);
        shared.counters.periods.fetch_add(1, Ordering::Relaxed);
        if let Some(spool) = &shared.spool {
            let mut enc = Encoder::new(Origin::Checks, out.ts_ms);
            for s in &out.samples {
                enc.push_sample(s);
            }
            if let Err(e) = spool.append(enc.finish()).await {
                shared
                    .counters
                    .journal_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "a period's samples were not journaled");
            }
        } else {
            let pending =
                std::mem::take(&mut *shared.pending.lock().unwrap_or_else(|e| e.into_inner()));
            out.samples.extend(pending.into_values().map(|mut s| {
                s.ts_ms = out.ts_ms;
                s
            }));
        }
        let exposed = Arc::new(shared.expose(&out.samples));
        *shared.exposed.lock().unwrap_or_else(|e| e.into_inner()) = exposed;
        *shared.latest.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(out.samples);
        plugins.start_runs();
    }
}

async fn statsd_loop(socket: tokio::net::UdpSocket, shared: Arc<Shared>) {
    let mut buf = vec![0u8; DATAGRAM_BYTES_MAX];
    loop {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(STATSD_FLUSH_MS);
        let mut samples: Vec<Sample> = Vec::new();
        let mut rejected = 0usize;
        loop {
            let got = tokio::time::timeout_at(deadline, socket.recv_from(&mut buf)).await;
            let Ok(Ok((n, _))) = got else { break };
            let now = now_ms();
            let batch = ingest::statsd::parse(&buf[..n], &ingest::Options::at(now));
            rejected += batch.rejected_total;
            let room = record::SAMPLES_MAX.saturating_sub(samples.len());
            rejected += batch.samples.len().saturating_sub(room);
            samples.extend(
                batch
                    .samples
                    .iter()
                    .take(room)
                    .map(|s| record::from_ingest(s, now)),
            );
        }
        let c = &shared.counters;
        c.pushed_rejected
            .fetch_add(rejected as u64, Ordering::Relaxed);
        if let Err(e) = shared.take(Origin::Statsd, samples).await {
            tracing::warn!(error = %e, "statsd samples not kept");
        }
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(nad))
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/write", post(write).put(write))
        .route("/write/{check}", post(write).put(write))
        .layer(DefaultBodyLimit::max(WRITE_BODY_BYTES_MAX))
        .with_state(shared)
}

fn latest(shared: &Shared) -> Arc<Vec<Sample>> {
    shared
        .latest
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

async fn nad(State(shared): State<Arc<Shared>>) -> Response {
    let body = expose::nad_json(&latest(&shared));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let exposed = shared
        .exposed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let protobuf = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/vnd.google.protobuf"));
    if protobuf {
        let body = expose::prometheus_protobuf(&exposed);
        return ([(header::CONTENT_TYPE, expose::PROTOBUF)], body).into_response();
    }
    let body = expose::prometheus_text(&exposed);
    let ct = "text/plain; version=0.0.4; charset=utf-8";
    ([(header::CONTENT_TYPE, ct)], body).into_response()
}

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    let f = &shared.forward;
    let doc = serde_json::json!({
        "host": shared.host,
        "periods": shared.counters.periods.load(Ordering::Relaxed),
        "backlog_bytes": shared.spool.as_ref().map_or(0, |s| s.backlog_bytes(CORE)),
        "forward": {
            "applied": f.applied.load(Ordering::Relaxed),
            "duplicates": f.duplicates.load(Ordering::Relaxed),
            "retries": f.retries.load(Ordering::Relaxed),
            "acked_through": f.acked_through.load(Ordering::Relaxed),
        },
    });
    axum::Json(doc).into_response()
}

fn refusal(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// httptrap (JSON or flatbuffers) from an application on the host; answered once kept (in
/// push mode: once durable in the local journal).
async fn write(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let flat = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(ingest::flat::CONTENT_TYPE));
    let now = now_ms();
    let batch = if flat {
        ingest::flat::parse(&body, &ingest::Options::at(now))
    } else {
        ingest::httptrap::parse(&body, &ingest::Options::at(now))
    };
    let error = (!batch.rejected.is_empty()).then(|| {
        let listed: Vec<String> = batch.rejected.iter().map(|r| r.to_string()).collect();
        listed.join("; ")
    });
    shared
        .counters
        .pushed_rejected
        .fetch_add(batch.rejected_total as u64, Ordering::Relaxed);
    if batch.stopped() {
        return refusal(StatusCode::BAD_REQUEST, error.unwrap_or_default());
    }
    let samples: Vec<Sample> = batch
        .samples
        .iter()
        .map(|s| record::from_ingest(s, now))
        .collect();
    let accepted = samples.len();
    if let Err(e) = shared.take(Origin::Httptrap, samples).await {
        return refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not kept, send again: {e}"),
        );
    }
    let doc = serde_json::json!({
        "stats": accepted, "filtered": batch.rejected_total, "error": error,
    });
    axum::Json(doc).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_cpu_reads_the_fields_after_the_name() {
        let line = "12 (a b) S 1 1 1 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0 1 1 1";
        assert_eq!(self_cpu_seconds(line), Some(3.0));
        assert_eq!(next_end(10_001, 10_000), 20_000);
    }
}
