//! Alerting inside `strata serve`: the engine (`alert` crate) opened over the server's store in
//! `<data_dir>/alerts`, its evaluator and history threads, and its API router. The engine is
//! kept here rather than in `App` so that the rest of the server does not change: `start`
//! before the router is built, `router` merged into it, `stop` before the store closes (the
//! engine holds the store until then).

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use alert::engine::{Engine, EngineOptions};
use axum::Router;
use store::Store;

use crate::cli_config::{self, Config};

/// Long polls end this long before the server's request timeout would cut them.
const WAIT_MARGIN_MS: u64 = 2_000;

struct Running {
    engine: Arc<Engine>,
    threads: Vec<JoinHandle<()>>,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

fn running() -> std::sync::MutexGuard<'static, Option<Running>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

fn options(config: &Config) -> Result<EngineOptions, String> {
    let a = &config.alerts;
    let mut o = EngineOptions::new(config.store.data_dir.join("alerts"));
    o.rules_dirs = a.rules_dir.iter().cloned().collect();
    o.grace_ms = i64::try_from(a.grace_ms).unwrap_or(i64::MAX);
    o.catch_up_periods_max = i64::try_from(a.catch_up_periods_max).unwrap_or(i64::MAX);
    o.eager_interval_ms = i64::try_from(a.eager_interval_ms).unwrap_or(i64::MAX);
    o.push_sources = a
        .push_sources
        .then_some((a.push_sources_factor, a.push_sources_severity));
    o.durability = cli_config::durability(&config.store.durability)?;
    if let Some(path) = &a.notify {
        let notify = alert::notify::Config::load(path)
            .map_err(|e| format!("alerts.notify {}: {e}", path.display()))?;
        o.notify = Some(Arc::new(notify));
    }
    Ok(o)
}

/// Opens the engine (restoring every instance) and starts its threads, unless disabled.
pub async fn start(config: &Config, store: &Arc<Store>) -> Result<(), String> {
    if !config.alerts.enabled {
        return Ok(());
    }
    let opts = options(config)?;
    let store = store.clone();
    let engine = tokio::task::spawn_blocking(move || Engine::open(store, opts))
        .await
        .map_err(|e| format!("opening alerts: {e}"))?
        .map_err(|e| format!("opening alerts: {e}"))?;
    let instances = engine.core().instances.len();
    tracing::info!(instances, "alerts open");
    let threads = engine.start();
    *running() = Some(Running { engine, threads });
    Ok(())
}

fn engine() -> Option<Arc<Engine>> {
    running().as_ref().map(|r| r.engine.clone())
}

/// The alert states and rulesets as Prometheus's `/api/v1/rules` and `/api/v1/alerts` show them
/// (empty lists while alerting is off), so Grafana lists them with no plugin.
struct PromRules;

impl promql::http::RuleSource for PromRules {
    fn rule_groups(&self) -> Vec<promql::http::RuleGroup> {
        let Some(engine) = engine() else {
            return Vec::new();
        };
        alert::prom::rule_groups(&engine)
            .into_iter()
            .map(|g| promql::http::RuleGroup {
                name: g.name,
                file: g.file,
                rules: g.rules,
                interval: g.interval_s,
                limit: 0,
                evaluation_time: g.evaluation_time_s,
                last_evaluation: g.last_evaluation,
            })
            .collect()
    }

    fn alerts(&self) -> Vec<promql::http::Alert> {
        let Some(engine) = engine() else {
            return Vec::new();
        };
        alert::prom::alerts(&engine)
            .into_iter()
            .map(|a| promql::http::Alert {
                labels: a.labels,
                annotations: a.annotations,
                state: a.state,
                active_at: a.active_at,
                value: a.value,
            })
            .collect()
    }
}

/// The promql router's options with alerting's rules and alerts plugged in.
pub fn promql_options() -> promql::http::Options {
    promql::http::Options {
        rules: Arc::new(PromRules),
        ..promql::http::Options::default()
    }
}

/// The alerting API (empty when alerting is off).
pub fn router(config: &Config) -> Router {
    let wait_max_ms = config
        .limits
        .request_timeout_ms
        .saturating_sub(WAIT_MARGIN_MS);
    match running().as_ref() {
        Some(r) => alert::http::router(
            r.engine.clone(),
            i64::try_from(wait_max_ms).unwrap_or(i64::MAX),
        ),
        None => Router::new(),
    }
}

/// Stops the threads and writes a snapshot, so the next start replays no journal.
pub async fn stop() {
    let Some(r) = running().take() else { return };
    let closed = tokio::task::spawn_blocking(move || {
        let result = r.engine.close();
        for t in r.threads {
            let _ = t.join();
        }
        result
    })
    .await;
    match closed {
        Ok(Ok(())) => tracing::info!("alerts closed"),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "alerts not closed cleanly; the journal restores them")
        }
        Err(e) => {
            tracing::warn!(error = %e, "alerts not closed cleanly; the journal restores them")
        }
    }
}
