//! The HTTP API: write endpoints (httptrap, Influx, Prometheus remote write, OTLP), the native
//! read API, `/metrics`, `/health`; and around every request: bearer token, timeout,
//! concurrency bound, latency and status recorded per endpoint.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::json;
use store::key::Tag;
use tokio::sync::Semaphore;

use super::httptrap::Encoding;
use super::{read, Endpoint, Mapped, Shared, WriteError};

/// The content type of OTLP protobuf bodies (and responses to them).
const PROTOBUF: &str = "application/x-protobuf";

/// A JSON response with a status.
pub fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// `{"error": message}` with a status.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    json_response(status, json!({ "error": message.into() }))
}

pub fn router(app: Shared) -> Router {
    let limits = &app.config.limits;
    let frame_state = Arc::new(Frame {
        app: app.clone(),
        permits: Semaphore::new(limits.http_concurrency_max),
        timeout: Duration::from_millis(limits.request_timeout_ms),
    });
    let routes = Router::new()
        .route(
            "/module/httptrap/{check}/{secret}",
            post(httptrap).put(httptrap),
        )
        .route("/write/{check}", post(httptrap_agent).put(httptrap_agent))
        .route("/write", post(influx))
        .route("/api/v2/write", post(influx))
        .route("/api/v1/write", post(remote_write))
        .route("/v1/metrics", post(otlp))
        .route("/api/strata/v1/find", get(read::find))
        .route(
            "/api/strata/v1/fetch",
            get(read::fetch_get).post(read::fetch_post),
        )
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .fallback(not_found)
        .with_state(app.clone())
        // The Prometheus-compatible read API (/api/v1/query, series, labels, …).
        .merge(promql::http::router_with(
            app.store.clone(),
            super::alerts::promql_options(),
        ))
        // The analytics language endpoint (/api/strata/v1/caql).
        .merge(query::http::router(app.store.clone()))
        // Alerting: /api/strata/v1/alerts, /api/strata/v1/rules.
        .merge(super::alerts::router(&app.config))
        // The web UI at `/` and the worksheets API.
        .merge(super::ui::router(app.clone()));
    routes.layer(middleware::from_fn_with_state(frame_state, frame))
}

struct Frame {
    app: Shared,
    permits: Semaphore,
    timeout: Duration,
}

/// Constant-time comparison, so a token or secret cannot be guessed byte by byte from timing.
pub fn same_secret(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    let mut diff = a.len() ^ b.len();
    for (i, &byte) in b.iter().enumerate() {
        diff |= usize::from(byte ^ a.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

/// Around every request: token check, concurrency bound, timeout, metrics.
async fn frame(State(frame): State<Arc<Frame>>, request: Request, next: Next) -> Response {
    let endpoint = Endpoint::of_path(request.uri().path());
    let start_ns = clock::now();
    let response = frame_inner(&frame, endpoint, request, next).await;
    let latency_ns = clock::now().saturating_sub(start_ns);
    tracing::debug!(
        endpoint = endpoint.name(),
        status = response.status().as_u16(),
        latency_us = latency_ns / 1000,
        "request"
    );
    frame
        .app
        .metrics
        .request(endpoint, latency_ns, response.status().as_u16());
    response
}

async fn frame_inner(frame: &Frame, endpoint: Endpoint, request: Request, next: Next) -> Response {
    if let Some(token) = &frame.app.config.auth.token {
        if endpoint != Endpoint::Health {
            let given = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                // `Token` is what InfluxDB clients send; the same token is accepted there.
                .and_then(|v| {
                    v.strip_prefix("Bearer ")
                        .or_else(|| v.strip_prefix("Token "))
                });
            if !given.is_some_and(|g| same_secret(g.trim(), token)) {
                let mut response = error(
                    StatusCode::UNAUTHORIZED,
                    "missing or wrong bearer token (Authorization: Bearer <auth.token>)",
                );
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return response;
            }
        }
    }
    let work = async {
        let Ok(_permit) = frame.permits.acquire().await else {
            return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
        };
        next.run(request).await
    };
    match tokio::time::timeout(frame.timeout, work).await {
        Ok(response) => response,
        Err(_) => error(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "request not finished within limits.request_timeout_ms = {}",
                frame.timeout.as_millis()
            ),
        ),
    }
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such endpoint")
}

async fn health() -> Response {
    json_response(StatusCode::OK, json!({ "status": "ok" }))
}

async fn metrics(State(app): State<Shared>) -> Response {
    let mut text = app.metrics.prometheus_text();
    // Only fails if a writer panicked holding the store's cumulative state.
    if let Ok(n) = app.store.cumulative_left_out() {
        let _ = write!(
            text,
            "# HELP strata_store_cumulative_left_out_total Cumulative histograms left out for \
             being older than their series' newest cumulative submission (their counts are in a \
             newer one's difference), since the store opened.\n\
             # TYPE strata_store_cumulative_left_out_total counter\n\
             strata_store_cumulative_left_out_total {n}\n"
        );
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

/// Request bodies' buffers kept for the next requests, and the largest kept: a body read into
/// a buffer allocated for it faulted in its pages every time (a histogram body is about a
/// megabyte). Bounded both ways, so a burst of huge bodies does not pin their memory.
const BODY_POOL_BUFFERS_MAX: usize = 8;
const BODY_POOL_BUFFER_BYTES_MAX: usize = 16 << 20;

static BODY_POOL: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// A request body read into a buffer from `BODY_POOL`, which gets it back when dropped.
pub struct PooledBody(Vec<u8>);

impl PooledBody {
    /// An empty body whose buffer holds at least `size_bytes`.
    fn with_capacity(size_bytes: usize) -> PooledBody {
        let kept = BODY_POOL.lock().ok().and_then(|mut pool| pool.pop());
        let mut buffer = kept.unwrap_or_default();
        debug_assert!(buffer.is_empty());
        buffer.reserve(size_bytes);
        PooledBody(buffer)
    }
}

impl AsRef<[u8]> for PooledBody {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        let mut buffer = std::mem::take(&mut self.0);
        if buffer.capacity() > BODY_POOL_BUFFER_BYTES_MAX {
            return;
        }
        buffer.clear();
        if let Ok(mut pool) = BODY_POOL.lock() {
            if pool.len() < BODY_POOL_BUFFERS_MAX {
                pool.push(buffer);
            }
        }
    }
}

/// A body problem as (status, message).
struct BodyError(StatusCode, String);

/// Reads the body within the size limit and the body budget; `Ok((bytes, gzip, budget share))`
/// — the caller holds the share until it has answered.
async fn read_body<'a>(
    app: &'a Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<(PooledBody, bool, tokio::sync::SemaphorePermit<'a>), BodyError> {
    let size_max = app.config.limits.body_size_bytes_max;
    let too_large = || {
        BodyError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is over limits.body_size_bytes_max = {size_max} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > size_max) {
        return Err(too_large());
    }
    let gzip = match headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("") | Some("identity") | Some("snappy") => false,
        Some("gzip") | Some("x-gzip") => true,
        Some(other) => {
            return Err(BodyError(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding `{other}` is not supported (gzip or none)"),
            ))
        }
    };
    let share_kib = declared
        .map(|n| n.div_ceil(1024))
        .unwrap_or(size_max.div_ceil(1024))
        .clamp(1, u64::from(app.body_budget_kib_max)) as u32;
    let permit = app
        .body_budget_kib
        .acquire_many(share_kib)
        .await
        .map_err(|_| BodyError(StatusCode::SERVICE_UNAVAILABLE, "shutting down".to_owned()))?;
    let limit = usize::try_from(size_max).unwrap_or(usize::MAX);
    // Each frame is copied out as it comes and dropped, so the connection's read buffer is
    // reused for the next (collecting every frame first held the whole body in fresh read
    // buffers, then copied it once more into a new buffer: two bodies of newly faulted pages
    // per request). The buffer is a kept one, sized once from Content-Length (checked against
    // the limit above).
    let declared_bytes = declared.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
    let mut out = PooledBody::with_capacity(declared_bytes.min(limit));
    let mut body = http_body_util::Limited::new(body, limit);
    // Bounded: `Limited` ends the body with an error past `limit` bytes.
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    out.0.extend_from_slice(data);
                }
            }
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
            Err(e) => {
                return Err(BodyError(
                    StatusCode::BAD_REQUEST,
                    format!("reading the request body: {e}"),
                ))
            }
        }
    }
    debug_assert!(out.0.len() <= limit);
    Ok((out, gzip, permit))
}

/// The status and message of a failed ingest.
fn write_error_status(e: &WriteError) -> (StatusCode, String) {
    match e {
        WriteError::Client(m) => (StatusCode::BAD_REQUEST, m.clone()),
        WriteError::Store { retryable, message } => (
            if *retryable {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            },
            message.clone(),
        ),
        WriteError::Body { too_large, message } => (
            if *too_large {
                StatusCode::PAYLOAD_TOO_LARGE
            } else {
                StatusCode::BAD_REQUEST
            },
            message.clone(),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// httptrap

/// Why an httptrap secret is refused, or `None` when it is accepted.
fn secret_refusal(app: &Shared, check: &str, secret: Option<&str>) -> Option<String> {
    let trap = &app.config.httptrap;
    let expected = trap.checks.get(check).or(trap.secret.as_ref());
    match (expected, secret) {
        (Some(expected), Some(given)) if same_secret(given, expected) => None,
        (Some(_), Some(_)) => Some(format!("wrong secret for check `{check}`")),
        (Some(_), None) => Some(format!(
            "check `{check}` has a secret: write to /module/httptrap/{check}/<secret>"
        )),
        (None, _) if app.http_loopback => None,
        (None, _) => Some(
            "no httptrap secret is configured and the HTTP listener is not loopback, so every \
             secret is refused: set httptrap.secret or httptrap.checks.<check> in the config"
                .to_owned(),
        ),
    }
}

async fn httptrap(
    State(app): State<Shared>,
    Path((check, secret)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    httptrap_common(app, check, Some(secret), headers, body).await
}

async fn httptrap_agent(
    State(app): State<Shared>,
    Path(check): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    httptrap_common(app, check, None, headers, body).await
}

async fn httptrap_common(
    app: Shared,
    check: String,
    secret: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Some(refusal) = secret_refusal(&app, &check, secret.as_deref()) {
        return error(StatusCode::FORBIDDEN, refusal);
    }
    let check_tag = match Tag::new("__check", check.as_bytes()) {
        Ok(tag) => tag,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("check name `{check}`: {e}"),
            )
        }
    };
    let (bytes, gzip, _budget) = match read_body(&app, &headers, body).await {
        Ok(read) => read,
        Err(BodyError(status, message)) => {
            return json_response(status, json!({"stats": 0, "filtered": 0, "error": message}))
        }
    };
    // The flatbuffer metric list on the same endpoint, chosen by Content-Type.
    let flat = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(ingest::flat::CONTENT_TYPE));
    let encoding = if flat { Encoding::Flat } else { Encoding::Json };
    // Straight from the body into the store batch, without a sample per metric.
    let result = super::httptrap::ingest(&app, encoding, bytes, gzip, vec![check_tag]).await;
    match result {
        Ok(mapped) => httptrap_response(&mapped),
        Err(e) => {
            let (status, message) = write_error_status(&e);
            json_response(status, json!({"stats": 0, "filtered": 0, "error": message}))
        }
    }
}

fn httptrap_response(mapped: &Mapped) -> Response {
    if mapped.stopped {
        // Nothing of a body whose parse stopped is stored.
        return json_response(
            mapped.rejected_status(),
            json!({
                "stats": 0,
                "filtered": mapped.rejected_total + mapped.accepted,
                "error": mapped.error_text(),
            }),
        );
    }
    let mut body = json!({ "stats": mapped.accepted, "filtered": mapped.rejected_total });
    if let Some(text) = mapped.error_text() {
        body["error"] = json!(text);
    }
    json_response(StatusCode::OK, body)
}

// ---------------------------------------------------------------------------------------------
// Influx line protocol

#[derive(serde::Deserialize)]
struct InfluxParams {
    precision: Option<String>,
}

fn influx_error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    json_response(status, json!({ "code": code, "message": message.into() }))
}

async fn influx(
    State(app): State<Shared>,
    Query(params): Query<InfluxParams>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let precision = match params.precision.as_deref() {
        None | Some("") => ingest::influx::Precision::Nanoseconds,
        Some(text) => match ingest::influx::Precision::from_param(text) {
            Some(p) => p,
            None => {
                return influx_error(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    format!("precision `{text}` is not one of ns, us, ms, s"),
                )
            }
        },
    };
    let (bytes, gzip, _budget) = match read_body(&app, &headers, body).await {
        Ok(read) => read,
        Err(BodyError(status, message)) => {
            let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "request too large"
            } else {
                "invalid"
            };
            return influx_error(status, code, message);
        }
    };
    // Straight into the store batch, series known from earlier requests by id.
    let result = super::influx::ingest(&app, bytes, gzip, precision).await;
    match result {
        Ok(mapped) => match mapped.error_text() {
            None => StatusCode::NO_CONTENT.into_response(),
            Some(text) => {
                let prefix = if mapped.stopped || mapped.accepted == 0 {
                    ""
                } else {
                    "partial write: "
                };
                let status = mapped.rejected_status();
                let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    "request too large"
                } else {
                    "invalid"
                };
                influx_error(status, code, format!("{prefix}{text}"))
            }
        },
        Err(e) => {
            let (status, message) = write_error_status(&e);
            let code = match status {
                StatusCode::BAD_REQUEST => "invalid",
                StatusCode::PAYLOAD_TOO_LARGE => "request too large",
                StatusCode::SERVICE_UNAVAILABLE => "unavailable",
                _ => "internal error",
            };
            influx_error(status, code, message)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Prometheus remote write 1.0

async fn remote_write(State(app): State<Shared>, headers: HeaderMap, body: Body) -> Response {
    let (bytes, gzip, _budget) = match read_body(&app, &headers, body).await {
        Ok(read) => read,
        Err(BodyError(status, message)) => return error(status, message),
    };
    let result = super::remote_write::ingest(&app, bytes, gzip).await;
    match result {
        // Prometheus drops a batch on a 4xx (other than 429) and retries on 5xx: permanently
        // bad data is a 400 naming it (the good series of the request are stored).
        Ok(mapped) => match mapped.error_text() {
            None => StatusCode::NO_CONTENT.into_response(),
            Some(text) => error(mapped.rejected_status(), text),
        },
        Err(e) => {
            let (status, message) = write_error_status(&e);
            error(status, message)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// OTLP/HTTP metrics

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_varint(out, u64::from(field << 3 | 2));
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// `ExportMetricsServiceResponse { partial_success { rejected_data_points, error_message } }`
/// (an empty message when nothing was rejected).
pub fn otlp_response_protobuf(rejected: u64, message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if rejected == 0 && message.is_empty() {
        return out;
    }
    let mut inner = Vec::new();
    if rejected > 0 {
        put_varint(&mut inner, 1 << 3);
        put_varint(&mut inner, rejected);
    }
    if !message.is_empty() {
        put_bytes_field(&mut inner, 2, message.as_bytes());
    }
    put_bytes_field(&mut out, 1, &inner);
    out
}

/// `google.rpc.Status { code, message }`, the body of an OTLP error response.
fn rpc_status_protobuf(code: u32, message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, 1 << 3);
    put_varint(&mut out, u64::from(code));
    put_bytes_field(&mut out, 2, message.as_bytes());
    out
}

/// gRPC status codes used in OTLP error bodies.
const RPC_INVALID_ARGUMENT: u32 = 3;
const RPC_UNAVAILABLE: u32 = 14;
const RPC_INTERNAL: u32 = 13;

fn otlp_reply(
    json_body: bool,
    status: StatusCode,
    json: serde_json::Value,
    proto: Vec<u8>,
) -> Response {
    if json_body {
        json_response(status, json)
    } else {
        (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(PROTOBUF))],
            proto,
        )
            .into_response()
    }
}

fn otlp_error(json_body: bool, status: StatusCode, message: String) -> Response {
    let code = match status {
        StatusCode::SERVICE_UNAVAILABLE => RPC_UNAVAILABLE,
        StatusCode::INTERNAL_SERVER_ERROR => RPC_INTERNAL,
        _ => RPC_INVALID_ARGUMENT,
    };
    otlp_reply(
        json_body,
        status,
        json!({ "code": code, "message": message }),
        rpc_status_protobuf(code, &message),
    )
}

async fn otlp(State(app): State<Shared>, headers: HeaderMap, body: Body) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json_body = match content_type.as_str() {
        "application/json" => true,
        PROTOBUF | "application/protobuf" => false,
        other => {
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "Content-Type `{other}`: OTLP takes application/x-protobuf or application/json"
                ),
            )
        }
    };
    let (bytes, gzip, _budget) = match read_body(&app, &headers, body).await {
        Ok(read) => read,
        Err(BodyError(status, message)) => return otlp_error(json_body, status, message),
    };
    let result = app
        .ingest(
            Endpoint::Otlp,
            bytes,
            gzip,
            Vec::new(),
            move |body, options| {
                if json_body {
                    ingest::otlp::parse_json(body, options)
                } else {
                    ingest::otlp::parse_protobuf(body, options)
                }
            },
        )
        .await;
    match result {
        Ok(mapped) if mapped.stopped => otlp_error(
            json_body,
            mapped.rejected_status(),
            mapped.error_text().unwrap_or_default(),
        ),
        Ok(mapped) => {
            let rejected = mapped.rejected_total as u64;
            let message = mapped.error_text().unwrap_or_default();
            let json = if rejected == 0 {
                json!({})
            } else {
                json!({ "partialSuccess": {
                    "rejectedDataPoints": rejected.to_string(),
                    "errorMessage": message,
                }})
            };
            otlp_reply(
                json_body,
                StatusCode::OK,
                json,
                otlp_response_protobuf(rejected, &message),
            )
        }
        Err(e) => {
            let (status, message) = write_error_status(&e);
            otlp_error(json_body, status, message)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Pooled bodies come out empty, go back when dropped, and the pool keeps at most
    /// `BODY_POOL_BUFFERS_MAX` buffers of at most `BODY_POOL_BUFFER_BYTES_MAX` each (other
    /// tests may use the pool at the same time, so only the bounds are asserted exactly).
    #[test]
    fn pooled_bodies_are_reused_within_bounds() {
        let bodies: Vec<PooledBody> = (0..BODY_POOL_BUFFERS_MAX * 2)
            .map(|i| {
                let mut body = PooledBody::with_capacity(1 << 10);
                assert!(body.as_ref().is_empty(), "a pooled body starts empty");
                body.0.extend_from_slice(format!("body {i}").as_bytes());
                body
            })
            .collect();
        drop(bodies);
        let huge = PooledBody::with_capacity(BODY_POOL_BUFFER_BYTES_MAX + 1);
        drop(huge);
        let pool = BODY_POOL.lock().unwrap();
        assert!(!pool.is_empty(), "dropped bodies were kept");
        assert!(pool.len() <= BODY_POOL_BUFFERS_MAX);
        assert!(pool
            .iter()
            .all(|b| b.is_empty() && b.capacity() <= BODY_POOL_BUFFER_BYTES_MAX));
    }

    #[test]
    fn same_secret_compares_whole_strings() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("ab", "abc"));
        assert!(!same_secret("abcd", "abc"));
        assert!(!same_secret("", "abc"));
    }

    #[test]
    fn otlp_partial_success_bytes() {
        assert!(otlp_response_protobuf(0, "").is_empty());
        // field 1 (len 6) { field 1 = 3, field 2 = "ab" }
        assert_eq!(
            otlp_response_protobuf(3, "ab"),
            vec![0x0a, 6, 0x08, 3, 0x12, 2, b'a', b'b']
        );
    }
}
