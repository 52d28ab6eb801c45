//! The broker's side of agents' links: an agent in reverse mode dials a broker
//! (`strata broker --agent-listen`) exactly as it would dial a core, and the broker plays the
//! core's part of the link (`core::Hub`: pinned mutual TLS, registry, HTTP/2 server).
//!
//! **Exactly once through two hops.** The broker cannot tell a resent batch from a new one — the
//! store that applies batches does that. So the broker keeps each batch an agent delivers as it
//! came, with the agent's own (epoch, sequence), as one *relayed record* in its journal
//! (`record::Relay`), durable before the agent is answered 2xx. Its forwarder sends that record
//! to the core under `Strata-Source: <broker id>/<agent id>` with the agent's epoch and sequence,
//! to `/write/<agent id>` (so the data is tagged `__check:<agent id>`, as when the agent dials a
//! core). A batch the agent sends twice (a lost answer, a broker `kill -9`) is journaled twice
//! and applied once by the core. The core's contract — at most 64 batches of one source in
//! flight — holds: the agent has at most 64 unanswered, and the broker's journal keeps their
//! order up to its own 64 in flight.
//!
//! **Registry.** Agents are registered on the broker as brokers are on a core, through the same
//! API (`/api/strata/v1/brokers` on the broker's push listener, so `strata broker register
//! --core http://<broker push address>` and the installer work unchanged). Registering a
//! certificate admits data, so the API answers only loopback clients unless the broker has an
//! agents token (`--agents-token-file`), which it then requires from everyone.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Extension, Router};
use hyper::body::Incoming;
use hyper::Request;

use crate::core::{Handler, Hub, HubConfig};
use crate::link::h2;
use crate::push::{Peer, PushStats, PUSH_BODY_BYTES_MAX};
use crate::record::Relay;
use crate::spool::Spool;

/// The agents' side of a broker: the hub and who may change its registry.
#[derive(Clone)]
pub struct Agents {
    hub: Arc<Hub>,
    token: Option<Arc<str>>,
}

impl Agents {
    /// Starts accepting agents' dials at `listen`: the identity and registry under
    /// `<data_dir>/agents`, each delivered batch journaled in `spool` as a relayed record.
    pub async fn start(
        broker_id: &str,
        data_dir: &Path,
        listen: SocketAddr,
        token: Option<String>,
        spool: Arc<Spool>,
        stats: Arc<PushStats>,
    ) -> Result<Agents, String> {
        // `<broker id>/<agent id>` is the agent's source at the core: a store source id.
        let peer_id_bytes_max = store::SOURCE_ID_BYTES_MAX.saturating_sub(broker_id.len() + 1);
        if peer_id_bytes_max < 8 {
            return Err(format!(
                "--agent-listen: the broker id `{broker_id}` leaves no room for agent ids \
                 (`<broker id>/<agent id>` must fit {} bytes)",
                store::SOURCE_ID_BYTES_MAX
            ));
        }
        let handler: Handler = Arc::new(move |agent, request| {
            let (spool, stats) = (spool.clone(), stats.clone());
            Box::pin(async move { relay(&spool, &stats, &agent, request).await })
        });
        let config = HubConfig {
            dir: data_dir.join("agents"),
            listen: Some(listen),
            common_name: format!("strata-broker-{broker_id}"),
            peer_id_bytes_max,
        };
        let hub = Hub::start(config, handler).await?;
        tracing::info!(
            listen = ?hub.listen,
            certificate_sha256 = %hub.fingerprint(),
            "agent links: agents in reverse mode pin this certificate"
        );
        Ok(Agents {
            hub: Arc::new(hub),
            token: token.map(Arc::from),
        })
    }

    /// The listener's bound address.
    pub fn listen(&self) -> Option<SocketAddr> {
        self.hub.listen
    }

    /// The registry API, served on the push listener (which must add the [`Peer`] extension).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/api/strata/v1/brokers", get(list).post(register))
            .route("/api/strata/v1/brokers/{id}", delete(remove))
            .with_state(self.clone())
    }

    /// Why this request may not use the registry (`None`: it may).
    fn refusal(&self, peer: SocketAddr, headers: &HeaderMap) -> Option<Response> {
        let Some(token) = &self.token else {
            if peer.ip().is_loopback() {
                return None;
            }
            let message = "the agent registry answers loopback clients only, unless the \
                           broker has --agents-token-file";
            return Some(answer(403, serde_json::json!({ "error": message })));
        };
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes())) {
            return None;
        }
        let message = "the agent registry needs `Authorization: Bearer <the agents token>`";
        Some(answer(401, serde_json::json!({ "error": message })))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn answer(status: u16, body: serde_json::Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

async fn list(
    State(agents): State<Agents>,
    Extension(Peer(peer)): Extension<Peer>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = agents.refusal(peer, &headers) {
        return refused;
    }
    answer(200, agents.hub.api_list())
}

async fn register(
    State(agents): State<Agents>,
    Extension(Peer(peer)): Extension<Peer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = agents.refusal(peer, &headers) {
        return refused;
    }
    let (status, body) = agents.hub.api_register(&body);
    answer(status, body)
}

async fn remove(
    State(agents): State<Agents>,
    Extension(Peer(peer)): Extension<Peer>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(refused) = agents.refusal(peer, &headers) {
        return refused;
    }
    match agents.hub.api_remove(&id) {
        (status, Some(body)) => answer(status, body),
        (status, None) => StatusCode::from_u16(status)
            .unwrap_or(StatusCode::NO_CONTENT)
            .into_response(),
    }
}

fn header_u64(request: &Request<Incoming>, name: &str) -> Result<u64, String> {
    let value = request
        .headers()
        .get(name)
        .ok_or_else(|| format!("`{name}` is missing: an agent's batch carries its origin"))?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("`{name}` is not a whole number"))
}

fn refused(status: u16, message: String) -> hyper::Response<h2::Body> {
    h2::respond(status, serde_json::json!({ "error": message }).to_string())
}

/// One request of a linked agent (the hub checked it names only that agent): its batch
/// journaled as a relayed record, answered once durable; a checks read answered with none.
async fn relay(
    spool: &Arc<Spool>,
    stats: &PushStats,
    agent: &str,
    request: Request<Incoming>,
) -> hyper::Response<h2::Body> {
    if request.method() == hyper::Method::GET {
        // An agent runs no checks; a list keeps a holder that asks content.
        return h2::respond(200, "[]");
    }
    let origin = header_u64(&request, "strata-epoch")
        .and_then(|e| header_u64(&request, "strata-sequence").map(|s| (e, s)));
    let (epoch, sequence) = match origin {
        Ok(o) => o,
        Err(e) => return refused(400, e),
    };
    let made_ms = header_u64(&request, crate::link::H_MADE_MS)
        .ok()
        .and_then(|m| i64::try_from(m).ok())
        .unwrap_or_else(|| (clock::wall() / 1_000_000) as i64);
    let flat = request
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == ingest::flat::CONTENT_TYPE.as_bytes());
    if !flat {
        let message = format!("an agent's batch is `{}`", ingest::flat::CONTENT_TYPE);
        return refused(415, message);
    }
    let body = match h2::read_body(request.into_body(), PUSH_BODY_BYTES_MAX).await {
        Ok(b) => b,
        Err(e) => return refused(413, format!("the batch: {e}")),
    };
    // Read once here so a batch the core would refuse is refused to its sender, and so the
    // forwarder knows whether it holds running totals.
    let batch = ingest::flat::parse(&body, &ingest::Options::at(made_ms));
    if batch.stopped() {
        let why: Vec<String> = batch.rejected.iter().map(|r| r.to_string()).collect();
        return refused(400, format!("the batch: {}", why.join("; ")));
    }
    let totals = batch.samples.iter().any(|s| {
        matches!(
            s.value,
            ingest::Value::Cumulative(_) | ingest::Value::CumulativeHistogram(_)
        )
    });
    let record = Relay {
        sender: agent.to_owned(),
        epoch,
        sequence,
        made_ms,
        totals,
        body: body.to_vec(),
    };
    stats.bodies.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = spool.append(record.encode()).await {
        stats.failed.fetch_add(1, Ordering::Relaxed);
        return refused(503, format!("not journaled, send again: {e}"));
    }
    let accepted = batch.samples.len() as u64;
    stats.accepted.fetch_add(accepted, Ordering::Relaxed);
    h2::respond(200, serde_json::json!({ "stats": accepted }).to_string())
}
