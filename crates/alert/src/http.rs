//! The alerting API, an axum router the server mounts.
//!
//! - `GET /api/strata/v1/alerts?state=&severity=&rule=&suppressed=&wait=` — instances that are
//!   not ok. `ETag` is a hash of the answer; with `If-None-Match` and `wait` the request waits
//!   for the answer to differ (at most `wait_max_ms`), else answers 304.
//! - `GET /api/strata/v1/alerts/history?rule=&fp=&start=&end=&limit=`
//! - `GET /api/strata/v1/rules`, `GET|PUT|DELETE /api/strata/v1/rules/{name}` (PUT: TOML
//!   body, `?backfill=15m` to evaluate a new ruleset over the recent past first)
//! - `POST /api/strata/v1/rules/evaluate?start=&end=` — a backtest of the TOML body's rulesets
//!   (the answer also holds the parsed rulesets, `rulesets`). A refused ruleset text answers 400
//!   with `line` and `column` when the error points somewhere in it (also for `PUT`).
//!
//! - `POST /api/strata/v1/alerts/{fp}/ack` — JSON `{"note", "by", "until"}` (`until` optional:
//!   RFC 3339 or ms; without it the acknowledgement lasts until the alert resolves);
//!   `DELETE` removes it. Acknowledged alerts get no reminders and no escalation.
//!   With notifications on, each listed alert carries `acked` (its acknowledgement or null) and
//!   `muted_by` (the maintenance windows muting it now).
//! - `GET /api/strata/v1/notifications?fp=` — recent deliveries (receiver, key, attempts,
//!   outcome) and the acknowledgements.
//! - `GET /api/strata/v1/maintenance` — every window (file and API), whether active now and
//!   its next start; `PUT /api/strata/v1/maintenance/{name}` — creates or replaces an API
//!   window (JSON, the fields of a `[[maintenance]]` table; 201 created, 200 replaced);
//!   `GET` one, `DELETE` one (404 when there is none, 409 for a file window).
//!   The list adds `kind` (once, weekly, cron), `next_start_ms`/`next_end_ms` (the occurrence
//!   in progress or the next one) and `mutes` (the firing alerts it mutes now); a refused body
//!   answers 400 with `field` naming what is wrong.
//! - `GET /api/strata/v1/routes` — the routing tree; `POST /api/strata/v1/routes/test` with
//!   `{"labels": {…}}` — where such an alert goes (`Config::explain`, as `strata rules routes
//!   test` prints it): receivers, windows in scope, inhibit rules.
//! - `POST /api/strata/v1/receivers/{name}/test`, `…/pagerduty`, `…/slack` — a test
//!   notification and inbound acknowledgements (`inbound`).
//!
//! Errors are `{"error": message}` with 400 (bad request), 404, 409 (a file-provisioned
//! ruleset), 503 (too many waiters, journal failing).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Map, Value};

use crate::engine::{ChangeError, Engine, Put, RuleInfo};
use crate::history::{Filter, Transition};
use crate::record::{Record, FLAG_BACKFILL, FLAG_EAGER, FLAG_LATE};
use crate::rule::{self, Source};
use crate::state::{Instance, State as AlertState};
use crate::util::{fnv1a, parse_duration_ms};

/// Long-poll waiters at once; more get 503.
pub const WAITERS_MAX: usize = 1_024;
/// Longest long poll.
pub const WAIT_MS_MAX: i64 = 60_000;
/// Transitions one history answer holds at most (and the default).
pub const HISTORY_LIMIT_MAX: usize = 10_000;
const HISTORY_LIMIT_DEFAULT: usize = 1_000;
/// Journal records one history request reads.
pub const HISTORY_SCAN_RECORDS_MAX: u64 = 1_000_000;

struct Api {
    engine: Arc<Engine>,
    wait_max_ms: i64,
    waiters: AtomicUsize,
}

/// The router; `wait_max_ms` keeps long polls under the server's request timeout.
pub fn router(engine: Arc<Engine>, wait_max_ms: i64) -> Router {
    let api = Arc::new(Api {
        engine,
        wait_max_ms: wait_max_ms.clamp(0, WAIT_MS_MAX),
        waiters: AtomicUsize::new(0),
    });
    Router::new()
        .route("/api/strata/v1/alerts", get(alerts))
        .route("/api/strata/v1/alerts/history", get(history))
        .route(
            "/api/strata/v1/alerts/{fp}/ack",
            post(ack_post).delete(ack_delete),
        )
        .route("/api/strata/v1/notifications", get(notifications))
        .route("/api/strata/v1/maintenance", get(windows_list))
        .route("/api/strata/v1/routes", get(routes_get))
        .route("/api/strata/v1/routes/test", post(routes_test))
        .route(
            "/api/strata/v1/maintenance/{name}",
            get(window_get).put(window_put).delete(window_delete),
        )
        .route(
            "/api/strata/v1/rules",
            get(rules).delete(rules_delete_owned),
        )
        .route("/api/strata/v1/rules/evaluate", post(evaluate))
        .route(
            "/api/strata/v1/rules/{name}",
            get(rule_get).put(rule_put).delete(rule_delete),
        )
        .with_state(api.clone())
        .merge(crate::inbound::router(api.engine.clone()))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

fn json_body(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn num(v: f64) -> Value {
    if v.is_finite() {
        json!(v)
    } else {
        Value::Null
    }
}

fn pairs(p: &[(String, String)]) -> Value {
    Value::Object(
        p.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<_, _>>(),
    )
}

pub fn instance_json(i: &Instance) -> Value {
    json!({
        "fp": format!("{:016x}", i.fp),
        "rule": i.ruleset,
        "stream": i.stream,
        "state": i.state.name(),
        "severity": i.severity,
        "since": i.since_ms,
        "active_since": (i.active_ms > 0).then_some(i.active_ms),
        "fired": (i.fired_ms > 0).then_some(i.fired_ms),
        "value": num(i.value),
        "flapping": i.flapping,
        "suppressed": i.suppressed,
        "labels": pairs(&i.labels),
        "annotations": pairs(&i.annotations),
    })
}

pub fn transition_json(t: &Transition) -> Value {
    let mut v = instance_json(&t.instance);
    v["t"] = json!(t.t_ms);
    v["written"] = json!(t.written_ms);
    v["from"] = json!(t.from_state.name());
    v["from_severity"] = json!(t.from_severity);
    v["late"] = json!(t.flags & FLAG_LATE != 0);
    v["eager"] = json!(t.flags & FLAG_EAGER != 0);
    v["backfill"] = json!(t.flags & FLAG_BACKFILL != 0);
    v
}

/// Which instances an alerts request wants.
struct AlertFilter {
    states: Option<Vec<AlertState>>,
    severities: Option<Vec<u8>>,
    rule: Option<String>,
    suppressed: Option<bool>,
}

fn list<T>(
    text: Option<&String>,
    parse: impl Fn(&str) -> Option<T>,
    what: &str,
) -> Result<Option<Vec<T>>, String> {
    text.map(|t| {
        t.split(',')
            .map(|x| parse(x.trim()).ok_or_else(|| format!("{what}: {x:?} is not one")))
            .collect()
    })
    .transpose()
}

impl AlertFilter {
    fn parse(q: &HashMap<String, String>) -> Result<AlertFilter, String> {
        Ok(AlertFilter {
            states: list(q.get("state"), AlertState::parse, "state")?,
            severities: list(
                q.get("severity"),
                |s| s.parse().ok().filter(|n| (0..=5).contains(n)),
                "severity",
            )?,
            rule: q.get("rule").cloned(),
            suppressed: match q.get("suppressed").map(String::as_str) {
                None => None,
                Some("true") => Some(true),
                Some("false") => Some(false),
                Some(o) => return Err(format!("suppressed: {o:?} is not true or false")),
            },
        })
    }

    fn admits(&self, i: &Instance) -> bool {
        let state_ok = match &self.states {
            Some(s) => s.contains(&i.state),
            None => i.state != AlertState::Ok,
        };
        state_ok
            && self
                .severities
                .as_ref()
                .is_none_or(|s| s.contains(&i.severity))
            && self.rule.as_ref().is_none_or(|r| *r == i.ruleset)
            && self.suppressed.is_none_or(|s| s == i.suppressed)
    }
}

/// What notifications do with a listed alert now: its acknowledgement and the windows muting
/// it (both only while it fires).
fn notify_state(n: &crate::notify::Notifier, i: &Instance, now_ms: i64, v: &mut Value) {
    let firing = notifying(i);
    v["acked"] = match n.ack_of(i.fp, i.fired_ms, now_ms) {
        Some(a) if firing => crate::inbound::ack_json(&a),
        _ => Value::Null,
    };
    v["muted_by"] = if firing {
        json!(n.muted_by(now_ms, &i.labels.iter().cloned().collect(), i.severity))
    } else {
        json!([])
    };
}

/// The answer and its ETag.
fn render_alerts(engine: &Engine, f: &AlertFilter) -> (String, String) {
    let core = engine.core();
    let now = engine.now_ms();
    let alerts: Vec<Value> = core
        .sorted_instances()
        .into_iter()
        .filter(|i| f.admits(i))
        .map(|i| {
            let mut v = instance_json(i);
            if let Some(n) = engine.notifier() {
                notify_state(n, i, now, &mut v);
            }
            v
        })
        .collect();
    drop(core);
    let body = json!({ "alerts": alerts }).to_string();
    let etag = format!("\"{:016x}\"", fnv1a(&[body.as_bytes()]));
    (body, etag)
}

struct Waiter<'a>(&'a AtomicUsize);

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn with_etag(status: StatusCode, body: String, etag: &str) -> Response {
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    if let Ok(v) = HeaderValue::from_str(etag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn alerts(
    State(api): State<Arc<Api>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let f = match AlertFilter::parse(&q) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let wait_ms = match q.get("wait").map(|w| parse_duration_ms(w)).transpose() {
        Ok(w) => w.unwrap_or(0).clamp(0, api.wait_max_ms),
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("wait: {e}")),
    };
    let known = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut changes = api.engine.subscribe();
    let (body, etag) = render_alerts(&api.engine, &f);
    if known.as_deref() != Some(etag.as_str()) {
        return with_etag(StatusCode::OK, body, &etag);
    }
    if wait_ms == 0 {
        return with_etag(StatusCode::NOT_MODIFIED, String::new(), &etag);
    }
    if api.waiters.fetch_add(1, Ordering::Relaxed) >= WAITERS_MAX {
        api.waiters.fetch_sub(1, Ordering::Relaxed);
        let mut r = error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("more than {WAITERS_MAX} waiting requests; retry"),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    }
    let _w = Waiter(&api.waiters);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms as u64);
    loop {
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {
                let (body, etag) = render_alerts(&api.engine, &f);
                if known.as_deref() != Some(etag.as_str()) {
                    return with_etag(StatusCode::OK, body, &etag);
                }
            }
            _ => return with_etag(StatusCode::NOT_MODIFIED, String::new(), &etag),
        }
    }
}

fn parse_fp(f: &str) -> Result<u64, String> {
    u64::from_str_radix(f, 16).map_err(|_| format!("fp: '{f}' is not 16 hex digits"))
}

fn notifier(api: &Api) -> Result<&Arc<crate::notify::Notifier>, Box<Response>> {
    api.engine.notifier().ok_or_else(|| {
        Box::new(error(
            StatusCode::NOT_FOUND,
            "notifications are not configured (alerts.notify)",
        ))
    })
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AckBody {
    #[serde(default)]
    note: String,
    #[serde(default)]
    by: String,
    until: Option<Value>,
}

async fn ack_post(State(api): State<Arc<Api>>, Path(fp): Path<String>, body: Bytes) -> Response {
    if let Err(r) = notifier(&api) {
        return *r;
    }
    let fp = match parse_fp(&fp) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let b: AckBody = if body.is_empty() {
        AckBody {
            note: String::new(),
            by: String::new(),
            until: None,
        }
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("acknowledgement body: {e}"),
                )
            }
        }
    };
    let until_ms = match &b.until {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(t)) => match crate::notify::config::parse_time_ms(t) {
            Ok(ms) => Some(ms),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("until: {e}")),
        },
        Some(_) => return error(StatusCode::BAD_REQUEST, "until: a time (RFC 3339) or ms"),
    };
    let engine = api.engine.clone();
    let done = tokio::task::spawn_blocking(move || {
        crate::inbound::acknowledge(&engine, fp, None, until_ms, b.by, b.note)
    })
    .await;
    match done {
        Ok(Ok(a)) => {
            api.engine.touch();
            json_body(StatusCode::OK, &crate::inbound::ack_json(&a))
        }
        Ok(Err((status, e))) => error(status, e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn ack_delete(State(api): State<Arc<Api>>, Path(fp): Path<String>) -> Response {
    let n = match notifier(&api) {
        Ok(n) => n.clone(),
        Err(r) => return *r,
    };
    let fp = match parse_fp(&fp) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match tokio::task::spawn_blocking(move || n.unack(fp)).await {
        Ok(Ok(true)) => {
            api.engine.touch();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Ok(false)) => error(
            StatusCode::NOT_FOUND,
            format!("alert {fp:016x} is not acknowledged"),
        ),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn notifications(
    State(api): State<Arc<Api>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let n = match notifier(&api) {
        Ok(n) => n,
        Err(r) => return *r,
    };
    let fp = match q.get("fp").map(|f| parse_fp(f)).transpose() {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let (delivered, dropped) = n.counts();
    let acks: Vec<Value> = n
        .acks()
        .iter()
        .filter(|a| fp.is_none_or(|f| f == a.fp))
        .map(crate::inbound::ack_json)
        .collect();
    json_body(
        StatusCode::OK,
        &json!({
            "deliveries": n.deliveries(fp),
            "acks": acks,
            "delivered": delivered,
            "dropped": dropped,
        }),
    )
}

// ---- maintenance windows ----

/// One alert a window mutes right now, for the listing.
fn muted_json(i: &Instance) -> Value {
    json!({
        "fp": format!("{:016x}", i.fp),
        "rule": i.ruleset,
        "stream": i.stream,
        "state": i.state.name(),
        "severity": i.severity,
    })
}

fn notifying(i: &Instance) -> bool {
    matches!(i.state, AlertState::Firing | AlertState::Recovering)
}

/// A window as listed: its fields, where it comes from, its kind, whether it is active now, the
/// occurrence in progress or the next one (RFC 3339 and ms), and the firing alerts it mutes now.
fn window_json(
    w: &crate::notify::window::Window,
    api_made: bool,
    now_ms: i64,
    instances: &[&Instance],
) -> Value {
    let mut v = serde_json::to_value(&w.spec).unwrap_or(Value::Null);
    let s = &w.spec;
    v["source"] = json!(if api_made { "api" } else { "file" });
    v["kind"] = json!(if s.cron.is_some() {
        "cron"
    } else if s.start.is_some() {
        "once"
    } else {
        "weekly"
    });
    let occ = w.occurrence_at(now_ms);
    v["active"] = json!(occ.is_some());
    if let Some((s, e)) = occ {
        v["active_from"] = json!(crate::util::rfc3339(s));
        v["active_until"] = json!(crate::util::rfc3339(e));
    }
    v["next_start"] = w
        .next_start(now_ms)
        .map_or(Value::Null, |t| json!(crate::util::rfc3339(t)));
    let next = w.current_or_next(now_ms);
    v["next_start_ms"] = next.map_or(Value::Null, |(s, _)| json!(s));
    v["next_end_ms"] = next.map_or(Value::Null, |(_, e)| json!(e));
    v["next_end"] = next.map_or(Value::Null, |(_, e)| json!(crate::util::rfc3339(e)));
    let mutes: Vec<Value> = if occ.is_some() {
        instances
            .iter()
            .filter(|i| notifying(i))
            .filter(|i| w.scopes(&i.labels.iter().cloned().collect(), i.severity))
            .map(|i| muted_json(i))
            .collect()
    } else {
        Vec::new()
    };
    v["mutes"] = Value::Array(mutes);
    v
}

async fn windows_list(State(api): State<Arc<Api>>) -> Response {
    let n = match notifier(&api) {
        Ok(n) => n,
        Err(r) => return *r,
    };
    let now = api.engine.now_ms();
    let core = api.engine.core();
    let instances = core.sorted_instances();
    let list: Vec<Value> = n
        .windows()
        .iter()
        .map(|(w, a)| window_json(w, *a, now, &instances))
        .collect();
    json_body(StatusCode::OK, &json!({ "windows": list }))
}

async fn window_get(State(api): State<Arc<Api>>, Path(name): Path<String>) -> Response {
    let n = match notifier(&api) {
        Ok(n) => n,
        Err(r) => return *r,
    };
    let now = api.engine.now_ms();
    let core = api.engine.core();
    let instances = core.sorted_instances();
    match n.windows().iter().find(|(w, _)| w.name() == name) {
        Some((w, a)) => json_body(StatusCode::OK, &window_json(w, *a, now, &instances)),
        None => error(
            StatusCode::NOT_FOUND,
            format!("no maintenance window '{name}'"),
        ),
    }
}

async fn window_put(
    State(api): State<Arc<Api>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let n = match notifier(&api) {
        Ok(n) => n.clone(),
        Err(r) => return *r,
    };
    let mut spec: crate::notify::window::WindowSpec = match serde_json::from_slice(&body) {
        Ok(s) => s,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("maintenance window body: {e}"),
            )
        }
    };
    if !spec.name.is_empty() && spec.name != name {
        return error(
            StatusCode::BAD_REQUEST,
            format!("name: '{}' differs from the path's '{name}'", spec.name),
        );
    }
    spec.name = name.clone();
    // Checked here first so that the answer names the field (the form shows it there).
    if let Err(e) = crate::notify::window::Window::check(spec.clone()) {
        return json_body(
            StatusCode::BAD_REQUEST,
            &json!({ "error": e.message, "field": e.field }),
        );
    }
    let key = name;
    match tokio::task::spawn_blocking(move || n.put_window(spec)).await {
        Ok(Ok(replaced)) => {
            api.engine.touch();
            let status = if replaced {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            json_body(status, &json!({ "name": key, "replaced": replaced }))
        }
        Ok(Err(e)) if e.contains("(read-only)") => error(StatusCode::CONFLICT, e),
        Ok(Err(e)) if e.starts_with("maintenance") || e.starts_with("at most") => {
            error(StatusCode::BAD_REQUEST, e)
        }
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn window_delete(State(api): State<Arc<Api>>, Path(name): Path<String>) -> Response {
    let n = match notifier(&api) {
        Ok(n) => n.clone(),
        Err(r) => return *r,
    };
    if n.config().maintenance.iter().any(|w| w.name() == name) {
        return error(
            StatusCode::CONFLICT,
            format!("maintenance '{name}' is defined in the configuration file (read-only)"),
        );
    }
    let key = name.clone();
    match tokio::task::spawn_blocking(move || n.delete_window(&key)).await {
        Ok(Ok(true)) => {
            api.engine.touch();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Ok(false)) => error(
            StatusCode::NOT_FOUND,
            format!("no maintenance window '{name}' made through the API"),
        ),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

// ---- the routing tree ----

fn timing_json(t: &crate::notify::group::Timing) -> Value {
    json!({
        "timed": t.timed(),
        "group_wait_ms": t.wait_ms,
        "group_interval_ms": t.interval_ms,
        "repeat_interval_ms": t.repeat_ms,
    })
}

/// One node and its children (depth bounded by the configuration's `ROUTE_DEPTH_MAX`).
fn route_json(r: &crate::notify::config::Route) -> Value {
    json!({
        "id": r.id,
        "receiver": r.receiver,
        "matchers": r.matchers.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
        "group_by": r.group_by,
        "continue": r.cont,
        "timing": timing_json(&r.timing),
        "routes": r.routes.iter().map(route_json).collect::<Vec<_>>(),
    })
}

async fn routes_get(State(api): State<Arc<Api>>) -> Response {
    let n = match notifier(&api) {
        Ok(n) => n,
        Err(r) => return *r,
    };
    let c = n.config();
    let receivers: Vec<&str> = c.receivers.iter().map(|r| r.name.as_str()).collect();
    json_body(
        StatusCode::OK,
        &json!({ "route": route_json(&c.route), "receivers": receivers }),
    )
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RoutesTestBody {
    labels: BTreeMap<String, String>,
}

/// Labels one example alert may carry.
const TEST_LABELS_MAX: usize = 256;

/// Where an alert with the body's labels goes: `Config::explain`, as `strata rules routes
/// test` prints it, over the file's and the API's windows.
async fn routes_test(State(api): State<Arc<Api>>, body: Bytes) -> Response {
    let n = match notifier(&api) {
        Ok(n) => n,
        Err(r) => return *r,
    };
    let b: RoutesTestBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("routes test body (expected {{\"labels\": {{\"name\": \"value\"}}}}): {e}"),
            )
        }
    };
    if b.labels.len() > TEST_LABELS_MAX {
        return error(
            StatusCode::BAD_REQUEST,
            format!("labels: at most {TEST_LABELS_MAX}"),
        );
    }
    let now = api.engine.now_ms();
    let windows = n.windows();
    let e = n
        .config()
        .explain(&b.labels, windows.iter().map(|(w, _)| w));
    let dests: Vec<Value> = e
        .dests
        .iter()
        .map(|d| {
            json!({
                "receiver": d.receiver,
                "route": d.route,
                "group_labels": d.group_labels,
                "timing": timing_json(&d.timing),
            })
        })
        .collect();
    let in_scope: Vec<Value> = e
        .windows
        .iter()
        .map(|name| {
            let active = windows
                .iter()
                .any(|(w, _)| w.name() == name && w.active_at(now));
            json!({ "name": name, "active": active })
        })
        .collect();
    json_body(
        StatusCode::OK,
        &json!({
            "labels": b.labels,
            "receivers": dests,
            "windows": in_scope,
            "inhibit": e.inhibit,
        }),
    )
}

fn time_param(q: &HashMap<String, String>, k: &str) -> Result<Option<i64>, String> {
    q.get(k)
        .map(|t| query::output::parse_time_ms(t).map_err(|e| format!("{k}: {e}")))
        .transpose()
}

async fn history(
    State(api): State<Arc<Api>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let parsed = (|| -> Result<(Filter, usize), String> {
        let fp = q
            .get("fp")
            .map(|f| {
                u64::from_str_radix(f, 16).map_err(|_| format!("fp: {f:?} is not 16 hex digits"))
            })
            .transpose()?;
        let limit = q
            .get("limit")
            .map(|l| l.parse::<usize>().map_err(|_| format!("limit: {l:?}")))
            .transpose()?
            .unwrap_or(HISTORY_LIMIT_DEFAULT)
            .min(HISTORY_LIMIT_MAX);
        Ok((
            Filter {
                ruleset: q.get("rule").cloned(),
                fp,
                start_ms: time_param(&q, "start")?,
                end_ms: time_param(&q, "end")?,
            },
            limit,
        ))
    })();
    let (f, limit) = match parsed {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let engine = api.engine.clone();
    let result =
        tokio::task::spawn_blocking(move || engine.history(&f, limit, HISTORY_SCAN_RECORDS_MAX))
            .await;
    match result {
        Ok(Ok((ts, truncated))) => {
            let v: Vec<Value> = ts.iter().map(transition_json).collect();
            json_body(
                StatusCode::OK,
                &json!({ "transitions": v, "truncated": truncated }),
            )
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("history failed: {e}"),
        ),
    }
}

fn rule_json(info: &RuleInfo) -> Value {
    let h = info.health.as_ref();
    let health = match (h, &info.error) {
        (_, Some(_)) => "error",
        (Some(h), None) if h.error.is_some() => "error",
        (Some(_), None) => "ok",
        (None, None) => "unknown",
    };
    let mut v = json!({
        "name": info.name,
        "source": info.source.describe(),
        "read_only": !matches!(info.source, Source::Api),
        "health": health,
        "error": info.error.clone().or_else(|| h.and_then(|h| h.error.clone())),
        "last_evaluation": h.map(|h| h.last_t_ms),
        "evaluation_ms": h.map(|h| h.duration_ns as f64 / 1e6),
        "streams": h.map(|h| h.instances),
    });
    if let Some(owner) = info.ruleset.as_ref().and_then(|r| r.spec.owner.as_ref()) {
        v["owner"] = json!(owner);
    }
    if let Some(r) = &info.ruleset {
        v["period_ms"] = json!(r.period_ms);
        v["definition"] = json!(r.to_toml());
        // The keys as fields, so the UI draws the severity ladder's thresholds without TOML.
        v["spec"] = serde_json::to_value(&r.spec).unwrap_or(Value::Null);
    }
    v
}

/// Where in a ruleset's TOML `message` points, as 1-based `(line, column)`: the TOML parser's
/// own position for a syntax error, else the quoted text (a condition) or the key the message
/// starts with. `None` when neither is in `text`.
fn position_in(text: &str, message: &str) -> Option<(usize, usize)> {
    // "ruleset \"x\": when …" names the ruleset first; the rest says where.
    let message = match message.split_once("\": ") {
        Some((head, rest)) if head.starts_with("ruleset \"") => rest,
        _ => message,
    };
    let at = match toml::from_str::<toml::Table>(text) {
        Err(e) => e.span().map(|s| s.start),
        Ok(_) => None,
    }
    .or_else(|| quoted_in(text, message))
    .or_else(|| key_in(text, message))?;
    let before = text.get(..at)?;
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some((line, column))
}

/// The first `"…"` of the message (a condition, a window) found verbatim in the text.
fn quoted_in(text: &str, message: &str) -> Option<usize> {
    let start = message.find('"')? + 1;
    let len = message.get(start..)?.find('"')?;
    let quoted = message.get(start..start + len)?;
    if quoted.is_empty() {
        return None;
    }
    text.find(quoted)
}

/// The key the message is about (`expr: …`, `window …`, `for and …`) at the start of a line.
fn key_in(text: &str, message: &str) -> Option<usize> {
    let key: String = message
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if key.is_empty() {
        return None;
    }
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let rest = trimmed.strip_prefix(key.as_str());
        if rest.is_some_and(|r| r.trim_start().starts_with('=')) {
            return Some(offset + line.len() - trimmed.len());
        }
        offset += line.len();
    }
    None
}

/// A 400 for a refused ruleset text, with the line and column it points at when known.
fn invalid(text: &str, message: String) -> Response {
    let mut body = json!({ "error": message });
    if let Some((line, column)) = position_in(text, &message) {
        body["line"] = json!(line);
        body["column"] = json!(column);
    }
    json_body(StatusCode::BAD_REQUEST, &body)
}

/// Every ruleset, or with `?owner=` only those that owner manages.
async fn rules(State(api): State<Arc<Api>>, Query(q): Query<HashMap<String, String>>) -> Response {
    let owner = q.get("owner");
    let v: Vec<Value> = api
        .engine
        .rule_infos()
        .iter()
        .filter(|i| {
            owner.is_none() || i.ruleset.as_ref().and_then(|r| r.spec.owner.as_ref()) == owner
        })
        .map(rule_json)
        .collect();
    json_body(StatusCode::OK, &json!({ "rules": v }))
}

/// `DELETE /api/strata/v1/rules?owner=<owner>`: every API ruleset that owner manages.
async fn rules_delete_owned(
    State(api): State<Arc<Api>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(owner) = q.get("owner").filter(|o| !o.is_empty()).cloned() else {
        return error(
            StatusCode::BAD_REQUEST,
            "DELETE /api/strata/v1/rules needs ?owner=<owner> (one ruleset: …/rules/<name>)",
        );
    };
    let engine = api.engine.clone();
    match tokio::task::spawn_blocking(move || engine.delete_owned(&owner)).await {
        Ok(Ok(names)) => json_body(StatusCode::OK, &json!({ "deleted": names })),
        Ok(Err(e)) => change_error(e),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("deleting the rulesets failed: {e}"),
        ),
    }
}

async fn rule_get(State(api): State<Arc<Api>>, Path(name): Path<String>) -> Response {
    match api.engine.rule_infos().iter().find(|r| r.name == name) {
        Some(info) => json_body(StatusCode::OK, &rule_json(info)),
        None => error(StatusCode::NOT_FOUND, format!("no ruleset {name:?}")),
    }
}

fn change_error(e: ChangeError) -> Response {
    let status = match e {
        ChangeError::Invalid(_) => StatusCode::BAD_REQUEST,
        ChangeError::ReadOnly(_) => StatusCode::CONFLICT,
        ChangeError::NotFound => StatusCode::NOT_FOUND,
        ChangeError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e.to_string())
}

async fn rule_put(
    State(api): State<Arc<Api>>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let Ok(text) = String::from_utf8(body.to_vec()) else {
        return error(StatusCode::BAD_REQUEST, "the body is not UTF-8 TOML");
    };
    let backfill = match q.get("backfill").map(|b| parse_duration_ms(b)).transpose() {
        Ok(b) => b.unwrap_or(0),
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("backfill: {e}")),
    };
    let engine = api.engine.clone();
    let n = name.clone();
    let body = text.clone();
    let result = tokio::task::spawn_blocking(move || engine.put_ruleset(&n, &body, backfill)).await;
    match result {
        Ok(Ok(put)) => {
            let status = if put == Put::Created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            let mut response = match api.engine.rule_infos().iter().find(|r| r.name == name) {
                Some(info) => json_body(status, &rule_json(info)),
                None => json_body(status, &json!({ "name": name })),
            };
            if put == Put::Unchanged {
                // The same header the saved-documents API answers an unchanged write with.
                response
                    .headers_mut()
                    .insert("x-strata-unchanged", HeaderValue::from_static("true"));
            }
            response
        }
        Ok(Err(ChangeError::Invalid(m))) => invalid(&text, m),
        Ok(Err(e)) => change_error(e),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("saving the ruleset failed: {e}"),
        ),
    }
}

async fn rule_delete(State(api): State<Arc<Api>>, Path(name): Path<String>) -> Response {
    let engine = api.engine.clone();
    match tokio::task::spawn_blocking(move || engine.delete_ruleset(&name)).await {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => change_error(e),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("deleting the ruleset failed: {e}"),
        ),
    }
}

/// A backtest's records as transitions.
pub fn transitions_of(records: &[Record]) -> Vec<Transition> {
    let mut out = Vec::new();
    for r in records {
        if let Record::Eval(e) = r {
            for u in &e.updates {
                out.push(Transition {
                    offset: 0,
                    t_ms: e.t_ms,
                    written_ms: e.written_ms,
                    flags: e.flags,
                    from_state: u.from_state,
                    from_severity: u.from_severity,
                    instance: u.instance.clone(),
                });
            }
        }
    }
    out
}

async fn evaluate(
    State(api): State<Arc<Api>>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let parsed = (|| -> Result<(i64, i64, String), String> {
        let end = time_param(&q, "end")?.unwrap_or_else(crate::util::wall_ms);
        let start = time_param(&q, "start")?.unwrap_or(end - 3_600_000);
        let text = String::from_utf8(body.to_vec())
            .map_err(|_| "the body is not UTF-8 TOML".to_string())?;
        Ok((start, end, text))
    })();
    let (start, end, text) = match parsed {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let engine = api.engine.clone();
    let body = text.clone();
    let result =
        tokio::task::spawn_blocking(move || -> Result<(Vec<Transition>, Value), String> {
            let base = engine.store().options().base_period_ms;
            let specs = match rule::parse_file_text(&body) {
                Ok(s) if !s.is_empty() => s,
                _ => vec![rule::parse_one(&body).map_err(|e| e.to_string())?],
            };
            // The parsed keys, so a caller can draw the thresholds it backtested.
            let parsed = serde_json::to_value(&specs).unwrap_or(Value::Null);
            let rulesets = specs
                .into_iter()
                .map(|s| {
                    rule::compile(s, Source::Api, base)
                        .map(Arc::new)
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, _>>()?;
            let records = crate::backtest::backtest(engine.store(), rulesets, start, end)?;
            Ok((transitions_of(&records), parsed))
        })
        .await;
    match result {
        Ok(Ok((ts, parsed))) => {
            let v: Vec<Value> = ts.iter().map(transition_json).collect();
            let summary: BTreeMap<&str, usize> = ts.iter().fold(BTreeMap::new(), |mut m, t| {
                *m.entry(t.instance.state.name()).or_default() += 1;
                m
            });
            json_body(
                StatusCode::OK,
                &json!({
                    "start": start,
                    "end": end,
                    "transitions": v,
                    "into": summary,
                    "rulesets": parsed,
                }),
            )
        }
        Ok(Err(e)) => invalid(&text, e),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("backtest failed: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::position_in;

    const TEXT: &str = "name = \"x\"\nexpr = 'find:histogram(\"login\")'\n[[severity]]\nlevel = 1\nwhen = \"count_abve(1.5) >= 3\"\n";

    #[test]
    fn errors_point_at_their_line_and_column() {
        // A condition the compiler refused: the quoted condition's place.
        let m = "ruleset \"x\": when \"count_abve(1.5) >= 3\": unknown reducer";
        assert_eq!(position_in(TEXT, m), Some((5, 9)));
        // A key the message starts with.
        assert_eq!(position_in(TEXT, "ruleset \"x\": expr: bad"), Some((2, 1)));
        // A TOML syntax error: the parser's own position.
        assert_eq!(
            position_in("name = \"x\"\nexpr = \n", "whatever"),
            Some((2, 8))
        );
        // Nothing to point at.
        assert_eq!(position_in(TEXT, "too many periods"), None);
    }
}
