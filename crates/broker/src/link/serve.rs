//! The broker's side of a link: it answers the core's requests (records, acknowledgements,
//! configuration) on whatever connection was established.

// A helper's early answer is the whole response; boxing it buys nothing here.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request, Response};

use super::h2::{self, Body};
use super::{
    ChecksApplied, ChecksPush, Hello, CONFIG_BYTES_MAX, FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX,
    H_BACKLOG_BYTES, H_COMMITTED, H_DROPPED, H_FIRST, PATH_ACK, PATH_CHECKS, PATH_HELLO,
    PATH_RECORDS,
};
use crate::spool::Spool;

/// What the link needs from the broker it serves.
pub trait BrokerSide: Send + Sync + 'static {
    fn id(&self) -> &str;
    fn spool(&self) -> &Arc<Spool>;
    /// Stores and schedules the checks a core assigns (replacing what it assigned before).
    fn apply_checks(&self, core: &str, push: ChecksPush) -> ChecksApplied;
    /// A core's link came up or went down.
    fn core_contact(&self, core: &str, up: bool);
}

/// Serves one link connection until it ends.
pub async fn serve<I>(io: I, side: Arc<dyn BrokerSide>) -> Result<(), String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    h2::serve(io, move |req| {
        let side = side.clone();
        async move { handle(side, req).await }
    })
    .await
}

fn query(req: &Request<Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn number(q: &HashMap<String, String>, key: &str) -> Result<u64, Response<Body>> {
    q.get(key)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| h2::respond(400, format!("`{key}`: expected a number")))
}

async fn handle(side: Arc<dyn BrokerSide>, req: Request<Incoming>) -> Response<Body> {
    let q = query(&req);
    let core = match q.get("core") {
        Some(c) if super::valid_core_name(c) => c.clone(),
        _ => return h2::respond(400, "`core`: expected the core's name"),
    };
    if let Err(e) = side.spool().ensure_subscriber(&core) {
        return h2::respond(409, e);
    }
    let path = req.uri().path().to_owned();
    let result = match (req.method().clone(), path.as_str()) {
        (Method::GET, PATH_HELLO) => Ok(hello(&*side, &core)),
        (Method::GET, PATH_RECORDS) => records(&*side, &core, &q).await,
        (Method::POST, PATH_ACK) => ack(&*side, &core, &q).await,
        (Method::PUT, PATH_CHECKS) => checks(&*side, &core, req).await,
        _ => Ok(h2::respond(404, "no such link path")),
    };
    result.unwrap_or_else(|r| r)
}

fn hello(side: &dyn BrokerSide, core: &str) -> Response<Body> {
    let spool = side.spool();
    side.core_contact(core, true);
    let hello = Hello {
        broker: side.id().to_owned(),
        epoch: spool.epoch(),
        earliest: spool.earliest(),
        committed: spool.committed(),
        checkpoint: spool.checkpoint(core).unwrap_or(0),
    };
    let body = serde_json::to_vec(&hello).unwrap_or_default();
    h2::respond(200, body)
}

async fn records(
    side: &dyn BrokerSide,
    core: &str,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, Response<Body>> {
    let from = number(q, "from")?;
    let wait_ms = number(q, "wait_ms").unwrap_or(0).min(FETCH_WAIT_MS_MAX);
    let spool = side.spool().clone();
    if spool.committed() <= from && wait_ms > 0 {
        let mut rx = spool.watch_committed();
        let _ = tokio::time::timeout(Duration::from_millis(wait_ms), async {
            while *rx.borrow_and_update() <= from {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }
    let core_owned = core.to_owned();
    let read = tokio::task::spawn_blocking(move || {
        let read = spool.read(from, FETCH_BYTES_MAX)?;
        let backlog = spool.backlog_bytes(&core_owned);
        Ok::<_, String>((read, backlog, spool))
    })
    .await
    .map_err(|e| h2::respond(500, e.to_string()))?
    .map_err(|e| h2::respond(500, e))?;
    let (read, backlog, spool) = read;
    let mut body = Vec::with_capacity(read.records.iter().map(|r| r.1.len() + 12).sum());
    for (offset, payload) in &read.records {
        super::put_record(&mut body, *offset, payload);
    }
    let mut resp = h2::respond(200, body);
    let headers = resp.headers_mut();
    let dropped = spool.counters.dropped_records.load(Ordering::Relaxed);
    for (name, value) in [
        (H_FIRST, read.first),
        (H_COMMITTED, spool.committed()),
        (H_DROPPED, dropped),
        (H_BACKLOG_BYTES, backlog),
    ] {
        if let Ok(v) = hyper::header::HeaderValue::from_str(&value.to_string()) {
            headers.insert(name, v);
        }
    }
    Ok(resp)
}

async fn ack(
    side: &dyn BrokerSide,
    core: &str,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, Response<Body>> {
    let through = number(q, "through")?;
    let spool = side.spool().clone();
    let core = core.to_owned();
    let done = tokio::task::spawn_blocking(move || spool.ack(&core, through))
        .await
        .map_err(|e| h2::respond(500, e.to_string()))?
        .map_err(|e| h2::respond(409, e))?;
    Ok(h2::respond(200, format!("{{\"checkpoint\":{done}}}")))
}

async fn checks(
    side: &dyn BrokerSide,
    core: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, Response<Body>> {
    let body = h2::read_body(req.into_body(), CONFIG_BYTES_MAX)
        .await
        .map_err(|e| h2::respond(413, e))?;
    let push: ChecksPush =
        serde_json::from_slice(&body).map_err(|e| h2::respond(400, format!("checks: {e}")))?;
    let applied = side.apply_checks(core, push);
    Ok(h2::respond(
        200,
        serde_json::to_vec(&applied).unwrap_or_default(),
    ))
}
