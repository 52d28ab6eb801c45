//! `/api/strata/v1/checks` (create, list, show, create-or-replace at a chosen id, delete) and
//! `/api/strata/v1/brokers` (status, registration, the core's identity). Every change is
//! written to disk before it is answered, then reaches the brokers' links.

// A helper's early answer is the whole response; boxing it buys nothing here.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::state::{self, Assigned, Registration, CORE_CHECKS_MAX, LINK_PEERS_MAX};
use super::{BrokerStatus, HubInner};

type Shared = State<Arc<HubInner>>;

pub fn router(inner: Arc<HubInner>) -> Router {
    Router::new()
        .route("/api/strata/v1/checks", get(list_checks).post(create_check))
        .route(
            "/api/strata/v1/checks/{id}",
            get(show_check).put(put_check).delete(delete_check),
        )
        .route("/api/strata/v1/brokers", get(list_brokers))
        .route("/api/strata/v1/brokers/identity", get(identity))
        .route(
            "/api/strata/v1/brokers/{id}",
            get(show_broker).put(put_broker).delete(delete_broker),
        )
        .with_state(inner)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn lock(inner: &HubInner) -> std::sync::MutexGuard<'_, state::CoreState> {
    inner.state.lock().unwrap_or_else(|e| e.into_inner())
}

async fn list_checks(State(inner): Shared) -> Response {
    let list: Vec<Assigned> = lock(&inner).checks.values().cloned().collect();
    Json(list).into_response()
}

async fn show_check(State(inner): Shared, Path(id): Path<String>) -> Response {
    match lock(&inner).checks.get(&id) {
        Some(a) => Json(a.clone()).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no check `{id}`")),
    }
}

/// Reads a check from a body, the id given by the path (or made up when neither has one).
fn read_check(body: &[u8], path_id: Option<&str>) -> Result<Assigned, Response> {
    let mut v: Value = serde_json::from_slice(body)
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("not a JSON check: {e}")))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "a check is a JSON object"))?;
    match (path_id, obj.get("id").and_then(Value::as_str)) {
        (Some(p), Some(b)) if p != b => {
            let m = format!("the body's id `{b}` is not the path's `{p}`");
            return Err(error(StatusCode::BAD_REQUEST, m));
        }
        (Some(p), _) => {
            obj.insert("id".into(), Value::String(p.to_owned()));
        }
        (None, None) => {
            obj.insert("id".into(), Value::String(new_id()));
        }
        (None, Some(_)) => {}
    }
    let a: Assigned = serde_json::from_value(v)
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("check: {e}")))?;
    checks::validate(&a.spec).map_err(|e| error(StatusCode::BAD_REQUEST, e.to_string()))?;
    Ok(a)
}

/// An id for a check created without one: the time and a counter.
fn new_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("check-{:x}-{n}", clock::wall() / 1_000_000)
}

/// Stores a check (`replace`: an existing one may be replaced). Answers with whether it was
/// created, replaced or already so.
fn store_check(inner: &HubInner, a: Assigned, replace: bool) -> Response {
    let mut s = lock(inner);
    if !s.brokers.contains_key(&a.broker) {
        let m = format!("`broker`: no broker `{}` is registered", a.broker);
        return error(StatusCode::BAD_REQUEST, m);
    }
    let status = match s.checks.get(&a.spec.id) {
        Some(old) if *old == a => {
            return (StatusCode::OK, Json(json!({"changed": false, "check": a}))).into_response()
        }
        Some(_) if !replace => {
            return error(
                StatusCode::CONFLICT,
                format!("check `{}` exists", a.spec.id),
            );
        }
        Some(_) => StatusCode::OK,
        None if s.checks.len() >= CORE_CHECKS_MAX => {
            return error(StatusCode::INSUFFICIENT_STORAGE, "too many checks");
        }
        None => StatusCode::CREATED,
    };
    let before = s.checks.insert(a.spec.id.clone(), a.clone());
    if let Err(e) = s.save_checks() {
        match before {
            Some(b) => s.checks.insert(a.spec.id.clone(), b),
            None => s.checks.remove(&a.spec.id),
        };
        return error(StatusCode::INTERNAL_SERVER_ERROR, e);
    }
    drop(s);
    inner.notify_changed();
    (status, Json(json!({"changed": true, "check": a}))).into_response()
}

async fn create_check(State(inner): Shared, body: Bytes) -> Response {
    match read_check(&body, None) {
        Ok(a) => store_check(&inner, a, false),
        Err(r) => r,
    }
}

async fn put_check(State(inner): Shared, Path(id): Path<String>, body: Bytes) -> Response {
    match read_check(&body, Some(&id)) {
        Ok(a) => store_check(&inner, a, true),
        Err(r) => r,
    }
}

async fn delete_check(State(inner): Shared, Path(id): Path<String>) -> Response {
    let mut s = lock(&inner);
    let Some(old) = s.checks.remove(&id) else {
        return error(StatusCode::NOT_FOUND, format!("no check `{id}`"));
    };
    if let Err(e) = s.save_checks() {
        s.checks.insert(id, old);
        return error(StatusCode::INTERNAL_SERVER_ERROR, e);
    }
    drop(s);
    inner.notify_changed();
    StatusCode::NO_CONTENT.into_response()
}

/// Every registered broker's status (a broker never heard from shows zeros).
pub fn statuses(inner: &HubInner) -> Vec<BrokerStatus> {
    let regs: Vec<(String, Registration)> = lock(inner)
        .brokers
        .iter()
        .map(|(id, r)| (id.clone(), r.clone()))
        .collect();
    let status = inner.status.lock().unwrap_or_else(|e| e.into_inner());
    regs.into_iter()
        .map(|(id, r)| {
            let mut s = status.get(&id).cloned().unwrap_or_default();
            s.id = id;
            if s.dial.is_empty() {
                s.dial = r.dial.name().to_owned();
            }
            s
        })
        .collect()
}

async fn list_brokers(State(inner): Shared) -> Response {
    Json(statuses(&inner)).into_response()
}

async fn show_broker(State(inner): Shared, Path(id): Path<String>) -> Response {
    match statuses(&inner).into_iter().find(|s| s.id == id) {
        Some(s) => Json(s).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no broker `{id}`")),
    }
}

async fn identity(State(inner): Shared) -> Response {
    Json(json!({
        "core": inner.config.name,
        "certificate_sha256": inner.fingerprint,
        "listen": inner.config.listen.map(|a| a.to_string()),
    }))
    .into_response()
}

async fn put_broker(State(inner): Shared, Path(id): Path<String>, body: Bytes) -> Response {
    if !state::valid_broker_id(&id) {
        let m = "a broker id is 1 to 64 letters, digits or `-_.:@`";
        return error(StatusCode::BAD_REQUEST, m);
    }
    let mut reg: Registration = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("registration: {e}")),
    };
    reg.certificate_sha256 = crate::tls::normalize(&reg.certificate_sha256);
    let hex = reg.certificate_sha256.len() == 64
        && reg
            .certificate_sha256
            .bytes()
            .all(|b| b.is_ascii_hexdigit());
    if !hex {
        let m = "`certificate_sha256`: 64 hex digits (`strata broker init` prints them)";
        return error(StatusCode::BAD_REQUEST, m);
    }
    if reg.dial == state::Dial::Core && reg.address.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "`address`: the core dials it (dial: core)",
        );
    }
    let mut s = lock(&inner);
    if !s.brokers.contains_key(&id) && s.brokers.len() >= LINK_PEERS_MAX {
        return error(StatusCode::INSUFFICIENT_STORAGE, "too many brokers");
    }
    let before = s.brokers.insert(id.clone(), reg.clone());
    if before.as_ref() == Some(&reg) {
        return (StatusCode::OK, Json(json!({"changed": false}))).into_response();
    }
    if let Err(e) = s.save_brokers() {
        match before {
            Some(b) => s.brokers.insert(id, b),
            None => s.brokers.remove(&id),
        };
        return error(StatusCode::INTERNAL_SERVER_ERROR, e);
    }
    drop(s);
    inner.notify_changed();
    let status = if before.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    (status, Json(json!({"changed": true}))).into_response()
}

async fn delete_broker(State(inner): Shared, Path(id): Path<String>) -> Response {
    let mut s = lock(&inner);
    let Some(old) = s.brokers.remove(&id) else {
        return error(StatusCode::NOT_FOUND, format!("no broker `{id}`"));
    };
    if let Err(e) = s.save_brokers() {
        s.brokers.insert(id, old);
        return error(StatusCode::INTERNAL_SERVER_ERROR, e);
    }
    drop(s);
    inner.notify_changed();
    StatusCode::NO_CONTENT.into_response()
}
