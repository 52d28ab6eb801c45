//! `GET|POST /api/strata/v1/caql?query=…&start=…&end=…&period=…`.
//!
//! Parameters come from the URL and, for POST, an `application/x-www-form-urlencoded` body
//! (merged; the body wins). `start`/`end`: unix seconds or RFC 3339 (defaults: the last hour to
//! now); `period`: seconds or a duration like `1m` (default: the store's base period). The answer
//! is [`crate::output`]'s JSON. Errors are JSON `{"error", "kind", …}`: 400 for a bad query or
//! parameter (parse errors add `position`, `line`, `column`, `expected`, `found`), 422 when a
//! limit is exceeded, 503 past the time limit, 500 for a store failure. Evaluation blocks on the
//! store, so it runs in `spawn_blocking`; a client that goes away cancels it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;
use store::Store;

use crate::eval::{EvalError, Limits, Remote};
use crate::output::{parse_period_ms, parse_time_ms, to_json};

/// Most parameters one request may carry.
pub const PARAMS_MAX: usize = 64;
/// The default range when `start` is not given: this long before `end`.
pub const DEFAULT_RANGE_MS: i64 = 3_600_000;

#[derive(Clone)]
struct Api {
    store: Arc<Store>,
    limits: Limits,
    remote: Option<Arc<dyn Remote>>,
}

/// The header (or parameter `read_after`) carrying a cluster write's read-after token.
pub const READ_AFTER_HEADER: &str = "strata-read-after";

pub fn router(store: Arc<Store>) -> Router {
    router_with_limits(store, Limits::default())
}

pub fn router_with_limits(store: Arc<Store>, limits: Limits) -> Router {
    router_with_remote(store, limits, None)
}

/// The router of a cluster front when `remote` is given: queries read every partition.
pub fn router_with_remote(
    store: Arc<Store>,
    limits: Limits,
    remote: Option<Arc<dyn Remote>>,
) -> Router {
    Router::new()
        .route("/api/strata/v1/caql", get(caql).post(caql))
        .with_state(Api {
            store,
            limits,
            remote,
        })
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn bad_param(message: String) -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        json!({"error": message, "kind": "bad_parameter"}).to_string(),
    )
}

fn error_response(e: &EvalError) -> Response {
    let (status, kind) = match e {
        EvalError::Parse(_) => (StatusCode::BAD_REQUEST, "parse"),
        EvalError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid"),
        EvalError::Limit(_) => (StatusCode::UNPROCESSABLE_ENTITY, "limit"),
        EvalError::Timeout { .. } => (StatusCode::SERVICE_UNAVAILABLE, "timeout"),
        EvalError::Cancelled => (StatusCode::SERVICE_UNAVAILABLE, "cancelled"),
        EvalError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "store"),
        EvalError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    };
    let mut body = json!({"error": e.to_string(), "kind": kind});
    if let EvalError::Parse(p) = e {
        body["position"] = json!(p.pos);
        body["line"] = json!(p.line);
        body["column"] = json!(p.column);
        body["expected"] = json!(p.expected);
        body["found"] = json!(p.found);
    }
    json_response(status, body.to_string())
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn percent_decode(bytes: &[u8]) -> Result<String, String> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let (Some(h), Some(l)) = (
                    bytes.get(i + 1).copied().and_then(hex),
                    bytes.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(format!("bad percent escape at byte {i}"));
                };
                out.push(h * 16 + l);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "parameters are not UTF-8".to_string())
}

fn parse_form(text: &[u8], out: &mut Vec<(String, String)>) -> Result<(), String> {
    for pair in text.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        if out.len() >= PARAMS_MAX {
            return Err(format!("more than {PARAMS_MAX} parameters"));
        }
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &[][..]),
        };
        out.push((percent_decode(k)?, percent_decode(v)?));
    }
    Ok(())
}

/// Sets the flag when dropped: axum drops the handler's future when the client disconnects.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

async fn caql(
    State(api): State<Api>,
    RawQuery(raw): RawQuery,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let mut params = Vec::new();
    if let Err(e) = parse_form(raw.as_deref().unwrap_or("").as_bytes(), &mut params)
        .and_then(|()| parse_form(&body, &mut params))
    {
        return bad_param(e);
    }
    // Later values (the body's) win.
    let get = |k: &str| {
        params
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    let Some(text) = get("query") else {
        return bad_param("missing parameter `query`".into());
    };
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let end_ms = match get("end").map(|t| parse_time_ms(&t)).transpose() {
        Ok(t) => t.unwrap_or(now_ms),
        Err(e) => return bad_param(format!("end: {e}")),
    };
    let start_ms = match get("start").map(|t| parse_time_ms(&t)).transpose() {
        Ok(t) => t.unwrap_or(end_ms.saturating_sub(DEFAULT_RANGE_MS)),
        Err(e) => return bad_param(format!("start: {e}")),
    };
    let period_ms = match get("period").map(|t| parse_period_ms(&t)).transpose() {
        Ok(p) => p.unwrap_or(api.store.options().base_period_ms),
        Err(e) => return bad_param(e),
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let guard = CancelOnDrop(cancel.clone());
    let store = api.store.clone();
    let limits = api.limits;
    let read_after = headers
        .get(READ_AFTER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| get("read_after"));
    let remote = api.remote.clone();
    let result = tokio::task::spawn_blocking(move || {
        let query = crate::parser::parse(&text)?;
        let parts = remote.as_deref().map(|r| (r, read_after.as_deref()));
        let range = (start_ms, end_ms, period_ms);
        crate::eval::evaluate_from(&store, parts, &query, range, limits, &cancel)
            .map(|out| to_json(&out))
    })
    .await;
    // Finished: setting the flag now is harmless.
    drop(guard);
    match result {
        Ok(Ok(body)) => json_response(StatusCode::OK, body),
        Ok(Err(e)) => error_response(&e),
        Err(e) => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": format!("evaluation failed: {e}"), "kind": "internal"}).to_string(),
        ),
    }
}
