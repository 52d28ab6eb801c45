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
use axum::{Extension, Router};
use http_body_util::BodyExt;
use serde_json::json;
use store::key::Tag;

use super::budget::Share;
use super::conn::Peer;
use super::reply::{self, error, json_response, ServeError, Shape, PROTOBUF};
use super::write::{write_body, Encoding, Protocol};
use super::{origin, Endpoint, Shared};

pub fn router(app: Shared) -> Router {
    let limits = &app.config.limits;
    let frame_state = Arc::new(Frame {
        app: app.clone(),
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
        .merge(super::clustered::read_routes(&app))
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .fallback(not_found)
        .with_state(app.clone())
        // The Prometheus-compatible read API (/api/v1/query, series, labels, …): its samples
        // bound and its queries' share of the query memory budget from
        // `limits.query_memory_bytes_max`.
        .merge(
            promql::http::router_with(
                app.store.clone(),
                promql::http::Options {
                    metadata: app.metadata.clone(),
                    exemplars: app.exemplars.clone(),
                    limits: promql_limits(&app),
                    remote: super::cluster_read::prom_remote(&app),
                    range_cache: app.range_cache.clone(),
                    ..super::alerts::promql_options()
                },
            )
            .layer(middleware::from_fn_with_state(app.clone(), promql_budget)),
        )
        // The analytics language endpoint (/api/strata/v1/caql): its point bound and its share
        // of the query memory budget from `limits.query_memory_bytes_max`.
        .merge(
            query::http::router_with_remote(
                app.store.clone(),
                caql_limits(&app),
                super::cluster_read::caql_remote(&app),
            )
            .layer(middleware::from_fn_with_state(app.clone(), caql_budget)),
        )
        // Alerting: /api/strata/v1/alerts, /api/strata/v1/rules.
        .merge(super::alerts::router(&app.config))
        // The web UI at `/` and the worksheets API.
        .merge(super::ui::router(app.clone()))
        // What `curl …/install.sh | sh` fetches.
        .merge(super::download::router())
        // The broker registry and link states (/api/strata/v1/brokers).
        .merge(super::link::router());
    // A cluster front's answers to writes carry their read-after token.
    let routes = match app.cluster_front() {
        Some(_) => routes.layer(middleware::from_fn(super::cluster_read::read_after_header)),
        None => routes,
    };
    routes
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(frame_state, frame))
}

/// A route asked with a method it does not take: 405 with a JSON body naming the method and
/// the path (axum's own answer has no body).
async fn method_not_allowed(request: Request) -> Response {
    let message = format!(
        "method {} is not allowed on {}",
        request.method(),
        request.uri().path()
    );
    error(StatusCode::METHOD_NOT_ALLOWED, message)
}

/// Bytes a CAQL evaluation is estimated to hold per stream × slice point (the values of every
/// stage, the find's reads and the response text; 15 M points held more than 6 GiB).
const CAQL_POINT_BYTES: u64 = 512;
/// CAQL queries that may run at once at their largest: each takes this fraction of the query
/// memory budget.
const CAQL_QUERIES_AT_ONCE: u64 = 4;

/// The analytics language's bounds with its points bound set so that `CAQL_QUERIES_AT_ONCE`
/// queries of the most points fit in the query memory budget.
fn caql_limits(app: &Shared) -> query::Limits {
    let share_bytes = app.config.limits.query_memory_bytes_max / CAQL_QUERIES_AT_ONCE;
    query::Limits {
        points_max: (share_bytes / CAQL_POINT_BYTES).max(1),
        ..query::Limits::default()
    }
}

/// Every CAQL query holds its share of the query memory budget (sized for its largest
/// evaluation, which the language's points bound keeps it under) while it runs.
async fn caql_budget(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let share_bytes = app.config.limits.query_memory_bytes_max / CAQL_QUERIES_AT_ONCE;
    let what = format!(
        "an analytics query of up to {} points",
        share_bytes / CAQL_POINT_BYTES
    );
    let _held = match app.query_budget.take(share_bytes, &what) {
        Ok(held) => held,
        Err(e) => return e.response(Shape::Json),
    };
    next.run(request).await
}

/// Bytes a PromQL evaluation is estimated to hold per sample it loads or produces while
/// evaluating, and per sample of its answer on top (the answer as values, then as JSON text).
/// Measured with `bench/abuse/promql_memory.py`: 17 B per sample for a query aggregating 10^6
/// samples, 78 B for one answering all of them (bench/RESULTS.md, "strata serve under abuse").
/// One price for both would refuse ordinary aggregations (1,000 series over 4 hours) to keep
/// the rare query that answers raw samples inside its share.
const PROMQL_SAMPLE_BYTES: u64 = 24;
const PROMQL_ANSWER_SAMPLE_BYTES: u64 = 64;
/// PromQL queries that may run at once at their largest: each takes this fraction of the query
/// memory budget.
const PROMQL_QUERIES_AT_ONCE: u64 = 4;

/// The Prometheus API's limits with its samples bound set so that `PROMQL_QUERIES_AT_ONCE`
/// queries of the most samples fit in the query memory budget (never above its own default).
fn promql_limits(app: &Shared) -> promql::eval::Limits {
    let share_bytes = app.config.limits.query_memory_bytes_max / PROMQL_QUERIES_AT_ONCE;
    let defaults = promql::eval::Limits::default();
    promql::eval::Limits {
        samples_per_query_max: (share_bytes / PROMQL_SAMPLE_BYTES)
            .clamp(1, defaults.samples_per_query_max),
        answer_sample_cost_samples: PROMQL_ANSWER_SAMPLE_BYTES.div_ceil(PROMQL_SAMPLE_BYTES),
        ..defaults
    }
}

/// Every PromQL query (instant or range) holds its share of the query memory budget while it
/// runs; without one it is answered 503 in the Prometheus API's error shape, as Prometheus
/// answers a query it cannot run now.
async fn promql_budget(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path != "/api/v1/query" && path != "/api/v1/query_range" {
        return next.run(request).await;
    }
    let share_bytes = app.config.limits.query_memory_bytes_max / PROMQL_QUERIES_AT_ONCE;
    let what = format!(
        "a PromQL query of up to {} samples",
        promql_limits(&app).samples_per_query_max
    );
    let _held = match app.query_budget.take(share_bytes, &what) {
        Ok(held) => held,
        Err(e) => {
            let body = json!({
                "status": "error",
                "errorType": "unavailable",
                "error": e.message,
            });
            return json_response(e.status, body);
        }
    };
    next.run(request).await
}

struct Frame {
    app: Shared,
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
    json_client_error(response).await
}

/// Bytes of a plain-text 4xx answer turned into JSON (the extractors' rejections are a line).
const PLAIN_ERROR_BYTES_MAX: usize = 4 << 10;

/// A 4xx answer that is not JSON (or protobuf, OTLP's own) — the routing layer's rejections of
/// a path or query it cannot decode — becomes `{"error": <its text>}`, like every other 4xx.
async fn json_client_error(response: Response) -> Response {
    if !response.status().is_client_error() {
        return response;
    }
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/json") || content_type.starts_with(PROTOBUF) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match http_body_util::Limited::new(body, PLAIN_ERROR_BYTES_MAX)
        .collect()
        .await
    {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes())
            .trim()
            .to_owned(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("request refused")
            .to_owned()
    } else {
        text
    };
    let mut converted = error(parts.status, message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            converted.headers_mut().append(name, value.clone());
        }
    }
    converted
}

/// Host names a loopback server answers to when `auth.allowed_hosts` is empty.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The host name of a `Host` value or an origin's authority, without its port.
fn host_name(authority: &str) -> &str {
    match authority.strip_prefix('[') {
        Some(rest) => rest
            .find(']')
            .map_or(authority, |end| &authority[..end + 2]),
        None => authority.split(':').next().unwrap_or(authority),
    }
}

/// Why a request a browser may have sent for another site is refused (`None`: it is not).
/// A foreign `Host` is a DNS-rebinding page reaching a local server by a name of its own; a
/// foreign `Origin` or `Sec-Fetch-Site` is a page of another site writing or reading.
fn browser_refusal(app: &Shared, request: &Request) -> Option<String> {
    let headers = request.headers();
    let auth = &app.config.auth;
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if let Some(host) = host {
        let name = host_name(host);
        let allowed = if !auth.allowed_hosts.is_empty() {
            auth.allowed_hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(name))
        } else {
            !app.http_loopback || LOOPBACK_HOSTS.iter().any(|h| h.eq_ignore_ascii_case(name))
        };
        if !allowed {
            return Some(format!(
                "Host `{name}` is not a name of this server (auth.allowed_hosts; a loopback \
                 server answers to localhost, 127.0.0.1 and [::1] by default)"
            ));
        }
    }
    match headers
        .get(header::ORIGIN)
        .map(|v| v.to_str().unwrap_or("?"))
    {
        Some(origin) => {
            let own = host.is_some_and(|host| {
                origin
                    .split_once("://")
                    .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host))
            });
            let configured = auth
                .allowed_origins
                .iter()
                .chain(&app.config.http.cors_origins)
                .any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin));
            (!own && !configured).then(|| {
                format!(
                    "a request from the web page of `{origin}` is refused: that origin is not \
                     in auth.allowed_origins or http.cors_origins"
                )
            })
        }
        None => match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
            Some(site @ ("cross-site" | "same-site")) => Some(format!(
                "a request from another site's web page (Sec-Fetch-Site: {site}) is refused"
            )),
            _ => None,
        },
    }
}

/// The request's `Origin` when it is one of `http.cors_origins`.
fn cors_origin(app: &Shared, request: &Request) -> Option<HeaderValue> {
    let origin = request.headers().get(header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    app.config
        .http
        .cors_origins
        .iter()
        .any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(text))
        .then(|| origin.clone())
}

/// How long a browser may keep a preflight's answer.
const CORS_MAX_AGE_S: &str = "600";

/// The answer to a CORS preflight from a configured origin: the methods and headers the API
/// takes (credentials are the bearer token, sent as a header).
fn cors_preflight(origin: HeaderValue) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, DELETE"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(
            "authorization, content-type, content-encoding, strata-source, strata-epoch, \
             strata-sequence",
        ),
    );
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(CORS_MAX_AGE_S),
    );
    headers.insert(header::VARY, HeaderValue::from_static("origin"));
    response
}

async fn frame_inner(frame: &Frame, endpoint: Endpoint, request: Request, next: Next) -> Response {
    if let Some(refusal) = browser_refusal(&frame.app, &request) {
        return error(StatusCode::FORBIDDEN, refusal);
    }
    let cors = cors_origin(&frame.app, &request);
    // A preflight carries no credentials: answered before the token check.
    let preflight = request.method() == axum::http::Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if let (Some(origin), true) = (&cors, preflight) {
        return cors_preflight(origin.clone());
    }
    let mut response = frame_checked(frame, endpoint, request, next).await;
    if let Some(origin) = cors {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.append(header::VARY, HeaderValue::from_static("origin"));
    }
    response
}

/// The token check, the concurrency bound and the request timeout around a request.
async fn frame_checked(
    frame: &Frame,
    endpoint: Endpoint,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = &frame.app.config.auth.token {
        // The UI's own files hold no data: a browser loads them without a token and then asks
        // for it (the login page) before any API call.
        let path = request.uri().path();
        let public = super::download::PUBLIC_PATHS.contains(&path) || super::ui::is_public(path);
        if endpoint != Endpoint::Health && !public {
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
        // An ingest request takes its slot once its body is in (`ingest_body`): a body trickled
        // in holds a connection and the bytes it sent, not one of the slots.
        if endpoint.is_ingest() {
            return next.run(request).await;
        }
        let Ok(_slot) = frame.app.request_slots.acquire().await else {
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

/// Features of this core's API an installer checks for before it writes anything.
const SUPPORTS: [&str; 4] = ["checks", "owner", "unchanged", "download"];
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `{"status": "ok"}`, or `"degraded"` with the problem while the store's background flushes
/// fail (writes are still durable in the write-ahead log; a 200 either way, so a load
/// balancer keeps the server that still accepts writes).
async fn health(State(app): State<Shared>) -> Response {
    let failures = app.store.background_failures();
    if failures.flush_failing {
        let problem = format!(
            "background flushes are failing ({} so far): {}",
            failures.flush_failures_total,
            failures.last_error.as_deref().unwrap_or("unknown error")
        );
        return json_response(
            StatusCode::OK,
            json!({ "status": "degraded", "problems": [problem], "version": VERSION, "supports": SUPPORTS }),
        );
    }
    json_response(
        StatusCode::OK,
        json!({ "status": "ok", "version": VERSION, "supports": SUPPORTS }),
    )
}

async fn metrics(State(app): State<Shared>) -> Response {
    let mut text = app.metrics.prometheus_text();
    text.push_str(&app.conn_metrics.prometheus_text());
    text.push_str(&super::link::prometheus_text());
    if let Some(drops) = app.statsd_inode.and_then(super::statsd::kernel_drops) {
        let _ = write!(
            text,
            "# HELP strata_statsd_kernel_drops_total statsd datagrams the kernel dropped because \
             the socket's receive buffer (statsd.receive_buffer_bytes) was full.\n\
             # TYPE strata_statsd_kernel_drops_total counter\n\
             strata_statsd_kernel_drops_total {drops}\n"
        );
    }
    if let Some(drops) = app.collectd_inode.and_then(super::statsd::kernel_drops) {
        let _ = write!(
            text,
            "# HELP strata_collectd_kernel_drops_total collectd datagrams the kernel dropped \
             because the socket's receive buffer (collectd.receive_buffer_bytes) was full.\n\
             # TYPE strata_collectd_kernel_drops_total counter\n\
             strata_collectd_kernel_drops_total {drops}\n"
        );
    }
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
    if let Ok(stats) = app.store.cardinality_stats() {
        cardinality_text(&mut text, &stats);
    }
    if let Some(cache) = &app.range_cache {
        let s = cache.stats();
        let _ = write!(
            text,
            "# HELP strata_query_result_cache_requests_total PromQL range queries the result \
             cache could answer, by whether it held some of their steps.\n\
             # TYPE strata_query_result_cache_requests_total counter\n\
             strata_query_result_cache_requests_total{{result=\"hit\"}} {}\n\
             strata_query_result_cache_requests_total{{result=\"miss\"}} {}\n\
             # HELP strata_query_result_cache_bytes Bytes of answers the result cache holds \
             (limits.query_result_cache_bytes_max).\n\
             # TYPE strata_query_result_cache_bytes gauge\n\
             strata_query_result_cache_bytes {}\n",
            s.hits, s.misses, s.bytes
        );
    }
    if let Some(storage) = app.cluster.as_ref().and_then(|c| c.storage.as_ref()) {
        partition_refusals_text(&mut text, &storage.status());
    }
    let failures = app.store.background_failures();
    let _ = write!(
        text,
        "# HELP strata_store_flush_failures_total Background flushes of the head to blocks that \
         failed (retried; the data stays in the write-ahead log).\n\
         # TYPE strata_store_flush_failures_total counter\n\
         strata_store_flush_failures_total {}\n\
         # HELP strata_store_maintenance_failures_total Background rollup, retention and \
         compaction passes that failed (retried).\n\
         # TYPE strata_store_maintenance_failures_total counter\n\
         strata_store_maintenance_failures_total {}\n\
         # HELP strata_store_flush_failing 1 while the last background flush failed.\n\
         # TYPE strata_store_flush_failing gauge\n\
         strata_store_flush_failing {}\n",
        failures.flush_failures_total,
        failures.maintenance_failures_total,
        u8::from(failures.flush_failing)
    );
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

/// A storage node's cardinality refusals per partition: the fronts answered 2xx for these
/// samples (their records were in Kafka); the partition's limits refused their series on apply.
fn partition_refusals_text(text: &mut String, partitions: &[cluster::PartitionStatus]) {
    let _ = write!(
        text,
        "# HELP strata_cluster_series_refused_total New series a partition's cardinality limits \
         refused on apply, by partition and limit.\n\
         # TYPE strata_cluster_series_refused_total counter\n"
    );
    for p in partitions {
        for (limit, n) in store::CardinalityLimit::ALL.iter().zip(p.series_refused) {
            let _ = writeln!(
                text,
                "strata_cluster_series_refused_total{{partition=\"{}\",limit=\"{}\"}} {n}",
                p.partition,
                limit.name()
            );
        }
    }
    let _ = write!(
        text,
        "# HELP strata_cluster_samples_refused_total Samples of those series left out, by \
         partition.\n\
         # TYPE strata_cluster_samples_refused_total counter\n"
    );
    for p in partitions {
        let _ = writeln!(
            text,
            "strata_cluster_samples_refused_total{{partition=\"{}\"}} {}",
            p.partition, p.samples_refused
        );
    }
}

/// The cardinality limits' counts and refusals in the Prometheus text format.
fn cardinality_text(text: &mut String, stats: &store::CardinalityStats) {
    let _ = write!(
        text,
        "# HELP strata_series_active Series with a sample within cardinality.active_window_s (as \
         of the last count, each minute), plus those created since.\n\
         # TYPE strata_series_active gauge\n\
         strata_series_active {}\n\
         # HELP strata_series_new_this_minute Series created in the current minute.\n\
         # TYPE strata_series_new_this_minute gauge\n\
         strata_series_new_this_minute {}\n\
         # HELP strata_series_sources Sources whose new and active series are counted.\n\
         # TYPE strata_series_sources gauge\n\
         strata_series_sources {}\n\
         # HELP strata_series_refused_total New series refused, by the cardinality limit that \
         refused them.\n\
         # TYPE strata_series_refused_total counter\n",
        stats.active, stats.new_this_minute, stats.sources
    );
    for (limit, n) in store::CardinalityLimit::ALL.iter().zip(stats.refused_total) {
        let _ = writeln!(
            text,
            "strata_series_refused_total{{limit=\"{}\"}} {n}",
            limit.name()
        );
    }
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

/// Compressed bytes fed to the gzip decoder between two looks at its output: deflate expands
/// at most ~1,032:1, so the output outruns the budget by at most ~1 MiB before it is counted.
const GZIP_INPUT_STEP_BYTES: usize = 1024;

type Gunzip = flate2::write::GzDecoder<Vec<u8>>;

/// Gzip bodies being decompressed at once (each a blocking thread at full speed).
const GZIP_DECODERS_MAX: usize = 2;
static GZIP_DECODERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(GZIP_DECODERS_MAX);

fn gzip_error(e: std::io::Error) -> ServeError {
    ServeError::bad_request(format!("gzip body: {e}"))
}

fn gzip_too_large(size_max: u64) -> ServeError {
    ServeError::too_large(format!(
        "gzip body decompresses past limits.body_size_bytes_max = {size_max} bytes"
    ))
}

/// Feeds one frame of a gzip body to its decoder, `GZIP_INPUT_STEP_BYTES` at a time, growing
/// the body's budget share to what is produced after each step (waiting for it on this
/// blocking thread); a body past `size_max` decompressed is refused.
fn gunzip_frame(
    mut gunzip: Gunzip,
    mut share: Share,
    data: &[u8],
    size_max: u64,
) -> Result<(Gunzip, Share), ServeError> {
    use std::io::Write as _;
    let runtime = tokio::runtime::Handle::current();
    // Bounded by the frame's length.
    for step in data.chunks(GZIP_INPUT_STEP_BYTES) {
        gunzip.write_all(step).map_err(gzip_error)?;
        let produced = gunzip.get_ref().len() as u64;
        if produced > size_max {
            return Err(gzip_too_large(size_max));
        }
        runtime.block_on(share.grow_to(produced))?;
    }
    Ok((gunzip, share))
}

/// Bytes of a request's buffer allocated up front from its declared length; the rest as the
/// bytes arrive.
const BODY_PRESIZE_BYTES_MAX: usize = 1 << 20;

/// How long a body may take before `limits.body_rate_bytes_per_s_min` applies to it.
const BODY_RATE_GRACE_MS: u64 = 10_000;

/// Reads the body (gunzipped when sent so) within the size limit and the body budget, both
/// counted on the bytes held — decompressed bytes as gzip produces them — not on what the
/// request declares; the caller holds the share until it has answered.
async fn read_body(
    app: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<(PooledBody, Share), ServeError> {
    let size_max = app.config.limits.body_size_bytes_max;
    let too_large = || {
        ServeError::too_large(format!(
            "request body is over limits.body_size_bytes_max = {size_max} bytes"
        ))
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
            return Err(ServeError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding `{other}` is not supported (gzip or none)"),
            ))
        }
    };
    let mut share = app.body_budget.share();
    let limit = usize::try_from(size_max).unwrap_or(usize::MAX);
    // Each frame is copied out as it comes and dropped, so the connection's read buffer is
    // reused for the next (collecting every frame first held the whole body in fresh read
    // buffers, then copied it once more into a new buffer: two bodies of newly faulted pages
    // per request). The buffer is a kept one, sized from Content-Length (checked against the
    // limit above) only up to `BODY_PRESIZE_BYTES_MAX`, then grown as bytes arrive: a client
    // declaring 64 MiB and sending a byte a second holds what it sent, not what it declared.
    let declared_bytes = declared.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
    let presize_bytes = declared_bytes.min(limit).min(BODY_PRESIZE_BYTES_MAX);
    let mut out = PooledBody::with_capacity(if gzip { 0 } else { presize_bytes });
    let mut decoder = gzip.then(|| flate2::write::GzDecoder::new(std::mem::take(&mut out.0)));
    let mut body = http_body_util::Limited::new(body, limit);
    // A body trickled in holds a request slot and a connection: after a grace period it must
    // have arrived at `limits.body_rate_bytes_per_s_min` on average.
    let rate_min = app.config.limits.body_rate_bytes_per_s_min.max(1);
    let started = tokio::time::Instant::now();
    let mut received_bytes: u64 = 0;
    // Bounded: `Limited` ends the body with an error past `limit` bytes.
    loop {
        let due_ms = BODY_RATE_GRACE_MS + received_bytes.saturating_mul(1000) / rate_min;
        let deadline = started + Duration::from_millis(due_ms);
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(_) => {
                return Err(ServeError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request body arrived slower than \
                         limits.body_rate_bytes_per_s_min = {rate_min} bytes per second \
                         ({received_bytes} bytes in {} ms)",
                        started.elapsed().as_millis()
                    ),
                ))
            }
        };
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
            Err(e) => {
                return Err(ServeError::bad_request(format!(
                    "reading the request body: {e}"
                )))
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        received_bytes += data.len() as u64;
        match decoder.take() {
            None => {
                let wanted = out.0.len() + data.len();
                share.grow_to(wanted as u64).await?;
                if wanted > out.0.capacity() {
                    // Doubling (bounded by the declared length when there is one) keeps the
                    // copies of a growing body linear.
                    let grown = wanted.max(out.0.capacity() * 2);
                    let capped = if declared_bytes >= wanted {
                        grown.min(declared_bytes)
                    } else {
                        grown
                    };
                    out.0.reserve_exact(capped.min(limit) - out.0.len());
                }
                out.0.extend_from_slice(&data);
            }
            Some(gunzip) => {
                // On the blocking pool: a bomb's megabytes are produced away from the
                // runtime's threads (and `/health`), by at most `GZIP_DECODERS_MAX` threads at
                // once, so that many bombs cannot take every core from the rest.
                let Ok(_decoding) = GZIP_DECODERS.acquire().await else {
                    return Err(ServeError::shutting_down());
                };
                let joined = tokio::task::spawn_blocking(move || {
                    gunzip_frame(gunzip, share, &data, size_max)
                })
                .await;
                let (gunzip, held) = joined.map_err(|e| {
                    ServeError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("decompressing the body failed: {e}"),
                    )
                })??;
                share = held;
                decoder = Some(gunzip);
            }
        }
    }
    if let Some(gunzip) = decoder {
        out.0 = gunzip.finish().map_err(gzip_error)?;
        if out.0.len() as u64 > size_max {
            return Err(gzip_too_large(size_max));
        }
        share.grow_to(out.0.len() as u64).await?;
    }
    debug_assert!(out.0.len() <= limit);
    Ok((out, share))
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
        return ServeError::new(StatusCode::FORBIDDEN, refusal).response(Shape::Json);
    }
    let check_tag = match Tag::new("__check", check.as_bytes()) {
        Ok(tag) => tag,
        Err(e) => {
            return ServeError::bad_request(format!("check name `{check}`: {e}"))
                .response(Shape::Json)
        }
    };
    // The flatbuffer metric list on the same endpoint, chosen by Content-Type.
    let flat = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(ingest::flat::CONTENT_TYPE));
    let encoding = if flat { Encoding::Flat } else { Encoding::Json };
    let protocol = Protocol::Httptrap(encoding);
    // A check is the cardinality limits' source of what is sent to it.
    let sender = format!("httptrap check {check}");
    let written = ingest_body(
        &app,
        &headers,
        Incoming {
            body,
            protocol,
            extra_tags: vec![check_tag],
            sender,
        },
        Shape::Httptrap,
    );
    match written.await {
        Ok(outcome) => reply::acknowledged(&outcome, reply::httptrap(&outcome)),
        Err(response) => response,
    }
}

/// One ingest request after its protocol's own checks: the sender identity its headers name
/// (refused with a 400 before the body is read when malformed), the body within its budget,
/// then the one write path. `Err` is the answer in the protocol's `shape`.
async fn ingest_body(
    app: &Shared,
    headers: &HeaderMap,
    incoming: Incoming,
    shape: Shape,
) -> Result<reply::Outcome, Response> {
    let Incoming {
        body,
        protocol,
        extra_tags,
        sender,
    } = incoming;
    let origin = origin::from_headers(headers, super::now_ms())
        .map_err(|message| ServeError::bad_request(message).response(shape))?;
    let (bytes, _budget) = read_body(app, headers, body)
        .await
        .map_err(|e| e.response(shape))?;
    let Ok(_slot) = app.request_slots.acquire().await else {
        return Err(ServeError::shutting_down().response(shape));
    };
    write_body(app, protocol, bytes, extra_tags, origin, sender)
        .await
        .map_err(|e| e.response(shape))
}

/// A request body to ingest: its protocol, the tags its keys get, and its sender (the
/// cardinality limits' source when it names no exactly-once origin).
struct Incoming {
    body: Body,
    protocol: Protocol,
    extra_tags: Vec<Tag>,
    sender: String,
}

/// The client's address as the cardinality limits' source.
fn address_sender(peer: Option<Extension<Peer>>) -> String {
    match peer {
        Some(Extension(Peer(ip))) => ip.to_string(),
        None => "unknown address".to_owned(),
    }
}

impl Incoming {
    fn from(body: Body, protocol: Protocol, peer: Option<Extension<Peer>>) -> Incoming {
        Incoming {
            body,
            protocol,
            extra_tags: Vec::new(),
            sender: address_sender(peer),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Influx line protocol

#[derive(serde::Deserialize)]
struct InfluxParams {
    precision: Option<String>,
}

async fn influx(
    State(app): State<Shared>,
    Query(params): Query<InfluxParams>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let precision = match params.precision.as_deref() {
        None | Some("") => ingest::influx::Precision::Nanoseconds,
        Some(text) => match ingest::influx::Precision::from_param(text) {
            Some(p) => p,
            None => {
                let message = format!("precision `{text}` is not one of ns, us, ms, s");
                return ServeError::bad_request(message).response(Shape::Influx);
            }
        },
    };
    let protocol = Protocol::Influx(precision);
    let incoming = Incoming::from(body, protocol, peer);
    match ingest_body(&app, &headers, incoming, Shape::Influx).await {
        Ok(outcome) => reply::acknowledged(&outcome, reply::influx(&outcome)),
        Err(response) => response,
    }
}

// ---------------------------------------------------------------------------------------------
// Prometheus remote write 1.0 and 2.0

async fn remote_write(
    State(app): State<Shared>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let protocol = match remote_write_version(content_type) {
        Ok(protocol) => protocol,
        Err(message) => {
            return ServeError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, message)
                .response(Shape::Json)
        }
    };
    let incoming = Incoming::from(body, protocol, peer);
    let written = ingest_body(&app, &headers, incoming, Shape::Json).await;
    match (protocol, written) {
        (Protocol::RemoteWrite2, Ok(outcome)) => {
            reply::acknowledged(&outcome, reply::remote_write2(&outcome))
        }
        (_, Ok(outcome)) => reply::acknowledged(&outcome, reply::remote_write(&outcome)),
        (Protocol::RemoteWrite2, Err(response)) => {
            reply::with_written(response, Default::default())
        }
        (_, Err(response)) => response,
    }
}

/// The remote write message a Content-Type names by its `proto=` parameter: none or
/// `prometheus.WriteRequest` is 1.0, `io.prometheus.write.v2.Request` 2.0; any other is refused
/// (415), never acknowledged, so the sender does not believe it delivered.
fn remote_write_version(content_type: &str) -> Result<Protocol, String> {
    let mut parts = content_type.split(';');
    let media = parts.next().unwrap_or("").trim();
    let proto = parts
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("proto"))
        .map(|(_, v)| v.trim().trim_matches('"'));
    match proto {
        None | Some("prometheus.WriteRequest") => Ok(Protocol::RemoteWrite),
        Some(ingest::remote_write2::PROTO) if media.eq_ignore_ascii_case(PROTOBUF) => {
            Ok(Protocol::RemoteWrite2)
        }
        Some(other) => Err(format!(
            "Content-Type `{content_type}`: remote write message `{other}` is not spoken here; \
             send prometheus.WriteRequest (1.0) or {} (2.0) as {PROTOBUF}",
            ingest::remote_write2::PROTO
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// OTLP/HTTP metrics

async fn otlp(
    State(app): State<Shared>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
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
            let message = format!(
                "Content-Type `{other}`: OTLP takes application/x-protobuf or application/json"
            );
            return ServeError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, message)
                .response(Shape::Json);
        }
    };
    let shape = Shape::Otlp { json: json_body };
    let protocol = Protocol::Otlp { json: json_body };
    let incoming = Incoming::from(body, protocol, peer);
    match ingest_body(&app, &headers, incoming, shape).await {
        Ok(outcome) => reply::acknowledged(&outcome, reply::otlp(&outcome, json_body)),
        Err(response) => response,
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
}
