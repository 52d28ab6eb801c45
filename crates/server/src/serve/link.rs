//! `strata serve`'s side of the broker links (`broker::core`, design in the broker crate's
//! `link/mod.rs`): the hub started with the server, the requests a linked broker makes — its
//! records written through the one write path with their exactly-once origin, its checks read
//! from the checks API — and the brokers API (`/api/strata/v1/brokers`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::Router;
use broker::core::{Handler, Hub, HubConfig};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use store::key::Tag;
use tower::ServiceExt as _;

use super::reply::{self, error, json_response, ServeError, Shape};
use super::write::{write_body, Encoding, Protocol};
use super::{origin, Shared};

/// The core's links, once started (the brokers API and `/metrics` read it).
static HUB: OnceLock<Hub> = OnceLock::new();

/// What the hub's requests reach: the server and its router. Shutdown empties it ([`release`]):
/// the hub lives in a static for the process's life, and a server it held would keep the store
/// referenced, so the store could not close cleanly.
static TARGET: Mutex<Option<(Shared, Router)>> = Mutex::new(None);

/// Longest answer the link hands back from the server's router (a broker's checks list).
const LINK_ANSWER_BYTES_MAX: usize = broker::link::RESPONSE_BYTES_MAX;

/// Starts the hub: the core's link identity and registry under `<data_dir>/links`, the link
/// listener at `listen` when given, the dialers of brokers that wait; `router` is the server's
/// (a broker's checks are read through it). Its one-line summary.
pub async fn start(
    app: &Shared,
    listen: Option<SocketAddr>,
    router: Router,
) -> Result<String, String> {
    let dir = app.config.store.data_dir.join("links");
    if let Ok(mut target) = TARGET.lock() {
        *target = Some((app.clone(), router));
    }
    let handler: Handler = Arc::new(move |broker, request| {
        let target = TARGET.lock().ok().and_then(|t| t.clone());
        Box::pin(async move {
            match target {
                Some((app, router)) => link_request(app, router, broker, request).await,
                None => shutting_down(),
            }
        })
    });
    let config = HubConfig {
        dir,
        listen,
        common_name: "strata-core".to_owned(),
        peer_id_bytes_max: store::SOURCE_ID_BYTES_MAX,
    };
    let hub = Hub::start(config, handler).await?;
    let line = format!(
        "links: listen={} core_sha256={}",
        hub.listen
            .map_or_else(|| "off".to_owned(), |a| a.to_string()),
        hub.fingerprint()
    );
    HUB.set(hub)
        .map_err(|_| "the broker links were started twice".to_owned())?;
    Ok(line)
}

/// Lets go of the server the hub's requests reach (at shutdown; later requests get a 503).
pub fn release() {
    if let Ok(mut target) = TARGET.lock() {
        *target = None;
    }
}

/// The answer to a link request that arrives while the server stops.
fn shutting_down() -> hyper::Response<Full<Bytes>> {
    let mut response = hyper::Response::new(Full::new(Bytes::from_static(
        br#"{"error":"the server is shutting down: send again later"}"#,
    )));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
}

/// The links' Prometheus text for `/metrics` (empty before the hub starts).
pub fn prometheus_text() -> String {
    HUB.get().map(Hub::prometheus_text).unwrap_or_default()
}

/// A request a linked broker may make (the hub checked it names only that broker).
async fn link_request(
    app: Shared,
    router: Router,
    broker: String,
    request: hyper::Request<Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let response = if request.method() == hyper::Method::POST {
        write(&app, &broker, request).await
    } else {
        through_router(&app, router, request).await
    };
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, LINK_ANSWER_BYTES_MAX).await {
        Ok(b) => b,
        Err(e) => Bytes::from(format!("{{\"error\":\"answer not read: {e}\"}}")),
    };
    hyper::Response::from_parts(parts, Full::new(bytes))
}

/// One journal record of `broker`: an httptrap body with its `Strata-*` origin, tagged
/// `__check:<check>` as an httptrap write to that check is, through the one write path. The
/// check is the path's (`/write/<check>`): the broker's own id, or a sender's whose batches it
/// relays (the hub allowed only those).
async fn write(app: &Shared, broker: &str, request: hyper::Request<Incoming>) -> Response {
    let check = request
        .uri()
        .path()
        .strip_prefix("/write/")
        .unwrap_or(broker)
        .to_owned();
    let headers = request.headers().clone();
    let origin = match origin::from_headers(&headers, super::now_ms()) {
        Ok(o) => o,
        Err(message) => return ServeError::bad_request(message).response(Shape::Httptrap),
    };
    if let Some(encoding) = headers.get(header::CONTENT_ENCODING) {
        if encoding.as_bytes() != b"identity" {
            let message = "a link's records are sent without Content-Encoding";
            return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, message);
        }
    }
    let flat = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(ingest::flat::CONTENT_TYPE));
    let encoding = if flat { Encoding::Flat } else { Encoding::Json };
    let size_max = usize::try_from(app.config.limits.body_size_bytes_max).unwrap_or(usize::MAX);
    let bytes = match Limited::new(request.into_body(), size_max).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            let message = format!("request body (limits.body_size_bytes_max): {e}");
            return ServeError::too_large(message).response(Shape::Httptrap);
        }
    };
    let check_tag = match Tag::new("__check", check.as_bytes()) {
        Ok(t) => t,
        Err(e) => {
            return ServeError::bad_request(format!("check `{check}`: {e}"))
                .response(Shape::Httptrap)
        }
    };
    let sender = format!("broker link {broker}");
    let protocol = Protocol::Httptrap(encoding);
    match write_body(app, protocol, bytes, vec![check_tag], origin, sender).await {
        Ok(outcome) => reply::acknowledged(&outcome, reply::httptrap(&outcome)),
        Err(e) => e.response(Shape::Httptrap),
    }
}

/// A read a linked broker may make (its checks), through the server's router as the link's
/// own: the certificate stands for the core's token, and no browser `Host` rule applies.
async fn through_router(
    app: &Shared,
    router: Router,
    request: hyper::Request<Incoming>,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = match path.parse() {
        Ok(u) => u,
        Err(_) => return error(StatusCode::BAD_REQUEST, "a link request's path"),
    };
    parts.headers.remove(header::HOST);
    if let Some(token) = &app.config.auth.token {
        if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
            parts.headers.insert(header::AUTHORIZATION, v);
        }
    }
    let request = axum::http::Request::from_parts(parts, axum::body::Body::new(body));
    match router.oneshot(request).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

// ---------------------------------------------------------------------------------------------
// The brokers API

/// `GET/POST /api/strata/v1/brokers`, `DELETE /api/strata/v1/brokers/{id}`.
pub fn router() -> Router {
    Router::new()
        .route("/api/strata/v1/brokers", get(list).post(register))
        .route("/api/strata/v1/brokers/{id}", delete(remove))
}

/// The answer while the hub is not started (a request between bind and start).
fn no_hub() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the broker links are not started on this server",
    )
}

async fn list() -> Response {
    let Some(hub) = HUB.get() else {
        return no_hub();
    };
    json_response(StatusCode::OK, hub.api_list())
}

async fn register(body: Bytes) -> Response {
    let Some(hub) = HUB.get() else {
        return no_hub();
    };
    let (status, answer) = hub.api_register(&body);
    json_response(status_of(status), answer)
}

async fn remove(Path(id): Path<String>) -> Response {
    let Some(hub) = HUB.get() else {
        return no_hub();
    };
    match hub.api_remove(&id) {
        (status, Some(answer)) => json_response(status_of(status), answer),
        (status, None) => status_of(status).into_response(),
    }
}

fn status_of(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}
