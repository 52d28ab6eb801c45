//! `GET /api/strata/v1/overview?limit=N`: what the landing page shows — the streams by recent
//! activity (the user's own, and the self-monitoring `strata:self` ones apart), series counts
//! (in all, and the user's by kind among the series looked at),
//! the addresses the server listens on, and its health since start (samples accepted and
//! rejected, requests by status class, store write errors, what is in memory and on disk).
//!
//! Bounded: at most `SCAN_SERIES_MAX` series are looked at (the newest ids, when there are
//! more; `scan_truncated` says so) and at most `LIMIT_MAX` streams are listed per group.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use store::SeriesId;

use super::metrics::STATUS_CLASS_NAMES;
use super::read::{is_self, order_recent};
use super::reply::{error, json_response};
use super::{now_ms, Shared};

/// Most series whose activity is looked at for one answer.
pub const SCAN_SERIES_MAX: u32 = 200_000;
/// Most hosts whose agents report that are offered a worksheet.
pub const HOSTS_MAX: usize = 50;
/// Most streams listed per group (`limit`); the default is `LIMIT_DEFAULT`.
pub const LIMIT_MAX: usize = 200;
const LIMIT_DEFAULT: usize = 20;

pub async fn overview(
    State(app): State<Shared>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let limit = match params.get("limit").map(|l| l.trim().parse::<usize>()) {
        None => LIMIT_DEFAULT,
        Some(Ok(n)) if (1..=LIMIT_MAX).contains(&n) => n,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("parameter `limit`: give an integer from 1 to {LIMIT_MAX}"),
            )
        }
    };
    let joined = tokio::task::spawn_blocking(move || answer(&app, limit)).await;
    joined.unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

fn answer(app: &Shared, limit: usize) -> Response {
    let snapshot = match app.store.index().snapshot() {
        Ok(s) => s,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let count = snapshot.series_count();
    let first = count.saturating_sub(SCAN_SERIES_MAX);
    let mut mine = Vec::new();
    let mut selfs = Vec::new();
    for id in first..count {
        match snapshot.series(SeriesId(id)) {
            Ok(Some(info)) if is_self(&info) => selfs.push(info),
            Ok(Some(info)) => mine.push(info),
            Ok(None) => {}
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
    let self_count = selfs.len();
    let mut by_kind = [0u64; 3];
    for s in &mine {
        by_kind[match s.kind {
            store::Kind::Numeric => 0,
            store::Kind::Histogram => 1,
            store::Kind::Text => 2,
        }] += 1;
    }
    order_recent(&mut mine);
    order_recent(&mut selfs);
    let hosts = agent_hosts(app, &mine);
    mine.truncate(limit);
    selfs.truncate(limit);
    let cardinality = snapshot.cardinality();
    let stats = app.store.stats().ok();
    let totals = app.metrics.totals();
    let accepted: u64 = totals.ingest.iter().map(|(_, a, _)| a).sum();
    let rejected: u64 = totals.ingest.iter().map(|(_, _, r)| r).sum();
    let by_endpoint: serde_json::Map<String, Value> = totals
        .ingest
        .iter()
        .map(|(e, a, r)| ((*e).to_owned(), json!({ "accepted": a, "rejected": r })))
        .collect();
    let requests: serde_json::Map<String, Value> = STATUS_CLASS_NAMES
        .iter()
        .zip(totals.requests)
        .map(|(class, n)| ((*class).to_owned(), json!(n)))
        .collect();
    let listen = &app.listening;
    json_response(
        StatusCode::OK,
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "started_ms": totals.started_ms,
            "now_ms": now_ms(),
            "series": {
                "total": cardinality.total,
                "numeric": cardinality.numeric,
                "histogram": cardinality.histogram,
                "text": cardinality.text,
                "self": self_count,
                "mine": { "numeric": by_kind[0], "histogram": by_kind[1], "text": by_kind[2] },
            },
            "streams": mine.iter().map(super::read::series_json).collect::<Vec<_>>(),
            "self_streams": selfs.iter().map(super::read::series_json).collect::<Vec<_>>(),
            "hosts": hosts,
            "scanned": count - first,
            "scan_truncated": first > 0,
            "listeners": {
                "http": listen.http,
                "statsd": listen.statsd,
                "graphite": listen.graphite,
                "collectd": listen.collectd,
                "tls": listen.tls,
            },
            "auth": app.config.auth.token.is_some(),
            "ingest": { "accepted": accepted, "rejected": rejected, "by_endpoint": by_endpoint },
            "requests": requests,
            "store": {
                "write_errors": totals.store_write_errors,
                "head_samples": stats.as_ref().map_or(0, |s| s.head_samples),
                "head_points_bytes": stats.as_ref().map_or(0, |s| s.head_points_bytes),
                "blocks": stats.as_ref().map_or(0, |s| s.blocks.len()),
                "block_bytes": stats.as_ref().map_or(0, |s| s.blocks.iter().map(|b| b.size_bytes).sum::<u64>()),
                "quarantined": stats.as_ref().map_or(0, |s| s.quarantined.len()),
            },
        }),
    )
}

/// Hosts whose agent reports (its `cpu_busy_ratio|ST[cpu:total,host:<id>]` stream), most
/// recent first: each with its saved worksheet's id, or the worksheet the core offers to make
/// (`install::host_worksheet`, the one `strata install agent` makes).
fn agent_hosts(app: &Shared, recent_first: &[store::SeriesInfo]) -> Vec<Value> {
    let mut hosts: Vec<Value> = Vec::new();
    for info in recent_first {
        if hosts.len() >= HOSTS_MAX {
            break;
        }
        if info.key.name() != "cpu_busy_ratio" {
            continue;
        }
        let tag = |cat: &str| {
            let tags = info.key.tags();
            tags.iter()
                .find(|t| t.category() == cat.as_bytes())
                .and_then(|t| std::str::from_utf8(t.value()).ok().map(str::to_owned))
        };
        let (Some(host), Some(cpu)) = (tag("host"), tag("cpu")) else {
            continue;
        };
        if cpu != "total" || hosts.iter().any(|h| h["host"] == host.as_str()) {
            continue;
        }
        let (id, body) = install::host_worksheet(&host);
        // A `host` tag any client may write: offered only when it makes a valid document id.
        if !super::saved::valid_id(&id) {
            continue;
        }
        let saved = app
            .config
            .store
            .data_dir
            .join("worksheets")
            .join(format!("{id}.json"))
            .is_file();
        hosts.push(json!({
            "host": host,
            "last_ms": info.activity_ms.map(|(_, last)| last),
            "worksheet": if saved { Value::from(id.clone()) } else { Value::Null },
            "offer": if saved { Value::Null } else { json!({ "id": id, "body": body }) },
        }));
    }
    hosts
}
