//! Push inputs at the broker: httptrap (JSON and flatbuffers), Prometheus remote write and OTLP
//! over HTTP, statsd and collectd over UDP — the parsers of `strata serve` (the `ingest` crate). A body
//! becomes one journal record, and the sender is answered only once that record is durable.

// A helper's early answer is the whole response; boxing it buys nothing here.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use crate::record::{self, Encoder, Origin};
use crate::spool::Spool;

/// Longest push body (after gzip).
pub const PUSH_BODY_BYTES_MAX: usize = record::BODY_BYTES_MAX;
/// Push HTTP connections served at once.
pub const PUSH_CONNECTIONS_MAX: usize = 256;
/// statsd datagrams are gathered this long into one record (stamped with its end).
pub const STATSD_FLUSH_MS: u64 = 1000;
/// Longest statsd datagram read.
pub const DATAGRAM_BYTES_MAX: usize = 65_535;

/// Push counters, by input.
#[derive(Default)]
pub struct PushStats {
    pub accepted: AtomicU64,
    pub rejected: AtomicU64,
    pub bodies: AtomicU64,
    pub failed: AtomicU64,
}

#[derive(Clone)]
pub struct Push {
    pub spool: Arc<Spool>,
    pub stats: Arc<PushStats>,
    /// OTLP name translation and promoted resource attributes.
    pub otlp: Arc<ingest::otlp::Translation>,
}

pub fn router(push: Push) -> Router {
    Router::new()
        .route(
            "/module/httptrap/{check}/{secret}",
            post(httptrap).put(httptrap),
        )
        .route("/write/{check}", post(httptrap).put(httptrap))
        .route("/api/v1/write", post(remote_write))
        .route("/v1/metrics", post(otlp))
        .layer(DefaultBodyLimit::max(PUSH_BODY_BYTES_MAX))
        .with_state(push)
}

fn now_ms() -> i64 {
    (clock::wall() / 1_000_000) as i64
}

/// An error answer: JSON `{"error": "..."}` naming what was wrong.
fn refusal(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

fn gunzipped(headers: &HeaderMap, body: Bytes) -> Result<Bytes, Response> {
    let gzip = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    if !gzip {
        return Ok(body);
    }
    use std::io::Read;
    let mut out = Vec::new();
    let mut r = flate2::read::GzDecoder::new(&body[..]).take(PUSH_BODY_BYTES_MAX as u64 + 1);
    r.read_to_end(&mut out)
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, format!("gzip body: {e}")))?;
    if out.len() > PUSH_BODY_BYTES_MAX {
        return Err(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("gzip body: more than {PUSH_BODY_BYTES_MAX} bytes unzipped"),
        ));
    }
    Ok(Bytes::from(out))
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// What a body became once journaled: samples accepted and the rejections.
struct Taken {
    accepted: usize,
    rejected: usize,
    error: Option<String>,
    stopped: bool,
}

/// Parses a body on the blocking pool, journals what was accepted, and waits until durable.
async fn take(
    push: &Push,
    origin: Origin,
    body: Bytes,
    parse: impl FnOnce(&[u8], &ingest::Options) -> ingest::Batch + Send + 'static,
) -> Result<Taken, Response> {
    let now = now_ms();
    let parsed = tokio::task::spawn_blocking(move || {
        let batch = parse(&body, &ingest::Options::at(now));
        let mut enc = Encoder::new(origin, now);
        if !batch.stopped() {
            for s in &batch.samples {
                enc.push_sample(&record::from_ingest(s, now));
            }
        }
        let error = (!batch.rejected.is_empty()).then(|| {
            let listed: Vec<String> = batch.rejected.iter().map(|r| r.to_string()).collect();
            listed.join("; ")
        });
        let taken = Taken {
            accepted: if batch.stopped() {
                0
            } else {
                batch.samples.len()
            },
            rejected: batch.rejected_total,
            error,
            stopped: batch.stopped(),
        };
        (enc, taken)
    })
    .await
    .map_err(|e| {
        refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("parsing the body: {e}"),
        )
    })?;
    let (enc, taken) = parsed;
    let stats = &push.stats;
    stats.bodies.fetch_add(1, Ordering::Relaxed);
    stats
        .rejected
        .fetch_add(taken.rejected as u64, Ordering::Relaxed);
    if !enc.is_empty() {
        if let Err(e) = push.spool.append(enc.finish()).await {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            let msg = format!("not journaled, send again: {e}");
            return Err(refusal(StatusCode::SERVICE_UNAVAILABLE, msg));
        }
    }
    stats
        .accepted
        .fetch_add(taken.accepted as u64, Ordering::Relaxed);
    Ok(taken)
}

async fn httptrap(State(push): State<Push>, headers: HeaderMap, body: Bytes) -> Response {
    let body = match gunzipped(&headers, body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let flat = content_type(&headers) == ingest::flat::CONTENT_TYPE;
    let parse = if flat {
        ingest::flat::parse
    } else {
        ingest::httptrap::parse
    };
    match take(&push, Origin::Httptrap, body, parse).await {
        Ok(t) => {
            let status = if t.stopped {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::OK
            };
            let doc = serde_json::json!({
                "stats": t.accepted, "filtered": t.rejected, "error": t.error,
            });
            (status, axum::Json(doc)).into_response()
        }
        Err(r) => r,
    }
}

async fn remote_write(State(push): State<Push>, headers: HeaderMap, body: Bytes) -> Response {
    let body = match gunzipped(&headers, body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    answer(
        take(
            &push,
            Origin::RemoteWrite,
            body,
            ingest::remote_write::parse,
        )
        .await,
    )
}

async fn otlp(State(push): State<Push>, headers: HeaderMap, body: Bytes) -> Response {
    let body = match gunzipped(&headers, body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let json = content_type(&headers) == "application/json";
    let translation = push.otlp.clone();
    let parse = move |body: &[u8], options: &ingest::Options| {
        let mut batch = ingest::Batch::default();
        if json {
            ingest::otlp::parse_json_with(body, options, &translation, &mut batch);
        } else {
            ingest::otlp::parse_protobuf_with(body, options, &translation, &mut batch);
        }
        batch
    };
    answer(take(&push, Origin::Otlp, body, parse).await)
}

/// 204 when all was taken, 400 naming the rejections otherwise (what was accepted is kept,
/// unless the parse stopped).
fn answer(taken: Result<Taken, Response>) -> Response {
    match taken {
        Ok(t) if t.error.is_none() => StatusCode::NO_CONTENT.into_response(),
        Ok(t) => refusal(StatusCode::BAD_REQUEST, t.error.unwrap_or_default()),
        Err(r) => r,
    }
}

/// Serves pushes on `listener`, at most `PUSH_CONNECTIONS_MAX` connections at once.
/// The peer address of an HTTP request to the push listener (an extension on every request).
#[derive(Clone, Copy)]
pub struct Peer(pub std::net::SocketAddr);

/// Serves the push endpoints, and `extra` routes beside them (the agent registry), each
/// request carrying its peer's address ([`Peer`]).
pub async fn serve_http(listener: tokio::net::TcpListener, push: Push, extra: Option<Router>) {
    let router = match extra {
        Some(extra) => router(push).merge(extra),
        None => router(push),
    };
    let serve = move |stream, peer| {
        let router = router.clone().layer(axum::Extension(Peer(peer)));
        async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper_util::service::TowerToHyperService::new(router);
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(io, service)
                    .await;
        }
    };
    crate::accept::serve_bounded(listener, PUSH_CONNECTIONS_MAX, "push", serve).await
}

/// statsd over UDP: datagrams gathered for `STATSD_FLUSH_MS` into one record whose samples
/// without their own time get the flush time, so a counter's increments within the interval
/// add up at the core as they do in `strata serve` (modes combine within one record).
pub async fn serve_statsd(socket: tokio::net::UdpSocket, push: Push) {
    serve_datagrams(socket, push, Origin::Statsd, ingest::statsd::parse).await
}

/// collectd's binary network protocol over UDP, gathered as statsd is (its samples carry their
/// own times). A cut, malformed, signed or encrypted datagram is refused whole, counted.
pub async fn serve_collectd(socket: tokio::net::UdpSocket, push: Push) {
    serve_datagrams(socket, push, Origin::Collectd, ingest::collectd::parse).await
}

/// Least time between two log lines about rejected datagrams of one listener.
const REJECTED_LOG_EVERY_MS: u64 = 10_000;

/// Datagrams gathered for `STATSD_FLUSH_MS` (at most `record::SAMPLES_MAX` samples, the rest
/// counted as rejected) into one journal record per window.
async fn serve_datagrams(
    socket: tokio::net::UdpSocket,
    push: Push,
    origin: Origin,
    parse: fn(&[u8], &ingest::Options) -> ingest::Batch,
) {
    let mut buf = vec![0u8; DATAGRAM_BYTES_MAX];
    let mut rejected_unlogged = 0u64;
    let mut logged_ms = 0u64;
    loop {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(STATSD_FLUSH_MS);
        let mut samples: Vec<ingest::Sample> = Vec::new();
        let mut rejected = 0usize;
        let mut example = String::new();
        loop {
            let got = tokio::time::timeout_at(deadline, socket.recv_from(&mut buf)).await;
            let Ok(Ok((n, _))) = got else { break };
            let batch = parse(&buf[..n], &ingest::Options::at(now_ms()));
            rejected += batch.rejected_total;
            if let Some(first) = batch.rejected.first().filter(|_| example.is_empty()) {
                example = first.to_string();
            }
            let room = record::SAMPLES_MAX.saturating_sub(samples.len());
            rejected += batch.samples.len().saturating_sub(room);
            samples.extend(batch.samples.into_iter().take(room));
        }
        push.stats
            .rejected
            .fetch_add(rejected as u64, Ordering::Relaxed);
        rejected_unlogged += rejected as u64;
        let now = now_ms();
        // A sender stuck on a bad datagram repeats it many times a second: one line per period.
        if rejected_unlogged > 0 && (now as u64).saturating_sub(logged_ms) >= REJECTED_LOG_EVERY_MS
        {
            tracing::warn!(
                input = origin.name(),
                rejected = rejected_unlogged,
                example,
                "rejected since the last report (at most one report per 10 s)"
            );
            rejected_unlogged = 0;
            logged_ms = now as u64;
        }
        if samples.is_empty() {
            continue;
        }
        let mut enc = Encoder::new(origin, now);
        for s in &samples {
            enc.push_sample(&record::from_ingest(s, now));
        }
        match push.spool.append(enc.finish()).await {
            Ok(_) => push
                .stats
                .accepted
                .fetch_add(samples.len() as u64, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!(error = %e, input = origin.name(), "samples not journaled");
                push.stats.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}
