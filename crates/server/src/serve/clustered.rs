//! `strata serve --cluster cluster.toml --node NAME`: this process's part of a cluster.
//!
//! A front turns each ingest request into one record per partition it touches and answers 2xx
//! once Kafka acknowledged every one (`App::store_inserted` calls [`ClusterRole::produce`]
//! instead of the local store). A storage node consumes its partitions into stores of their own
//! and answers reads on each at `/api/strata/v1/cluster/p/{n}/…`; a front's reads ask one owner
//! of every partition and join the answers (`cluster_read.rs`: owner choice, read-after
//! tokens, PromQL and CAQL).

// A helper's early answer is the whole response; boxing it buys nothing here.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use cluster::{Role, Splitter, Topology};
use serde_json::{json, Value};
use store::{KeyRef, Origin, SourceId, Store, WriteBatch};

use super::reply::{error, json_response, ServeError};
use super::{cluster_read, read, Shared};

/// This process's roles and what they hold.
pub struct ClusterRole {
    pub topology: Topology,
    pub node: cluster::Node,
    pub front: Option<cluster::Front>,
    pub storage: Option<Arc<cluster::StorageNode>>,
    /// A reading `App` over each owned partition's store (its handlers are the single-node
    /// ones).
    pub partition_apps: BTreeMap<u32, Shared>,
    /// The identity of writes that came without one: this front's name, its start time as the
    /// epoch (a restarted front is a new life), a counter.
    own_source: SourceId,
    own_epoch: u64,
    own_seq: AtomicU64,
}

impl ClusterRole {
    pub fn new(
        topology: Topology,
        node: cluster::Node,
        front: Option<cluster::Front>,
        storage: Option<Arc<cluster::StorageNode>>,
        started_ms: i64,
    ) -> Result<ClusterRole, String> {
        let mut name = format!("front-{}", node.name);
        name.truncate(store::SOURCE_ID_BYTES_MAX);
        let own_source = SourceId::new(&name)
            .map_err(|e| format!("node name `{}` as a source id: {e}", node.name))?;
        Ok(ClusterRole {
            topology,
            node,
            front,
            storage,
            partition_apps: BTreeMap::new(),
            own_source,
            own_epoch: u64::try_from(started_ms).unwrap_or(0),
            own_seq: AtomicU64::new(0),
        })
    }

    pub fn is_front(&self) -> bool {
        self.front.is_some()
    }

    /// Produces a batch to the partitions of its streams (blocking: called on the write pool);
    /// Ok once every partition acknowledged with acks=all.
    pub fn produce(
        &self,
        local: &Store,
        batch: &WriteBatch,
        now_ms: i64,
    ) -> Result<(), ServeError> {
        let Some(front) = &self.front else {
            return Err(ServeError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "node {} has no front role: send writes to a front",
                    self.node.name
                ),
            ));
        };
        let mut splitter = Splitter::new(front.partition_count());
        for (key, ts_ms, value) in batch.samples() {
            let text = match key {
                KeyRef::Text(t) => std::borrow::Cow::Borrowed(t),
                KeyRef::Id(id) => match local.index().key_text(id) {
                    Ok(Some(t)) => std::borrow::Cow::Owned(t),
                    _ => {
                        return Err(ServeError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "a series id of the front's own store has no key",
                        ))
                    }
                },
            };
            splitter
                .add(&text, ts_ms, &value)
                .map_err(|e| ServeError::new(StatusCode::PAYLOAD_TOO_LARGE, e.0))?;
        }
        let origin = match batch.origin() {
            Some(o) => o.clone(),
            None => Origin {
                source: self.own_source.clone(),
                epoch: self.own_epoch,
                seq: self.own_seq.fetch_add(1, Ordering::Relaxed),
                received_ms: now_ms,
            },
        };
        let records = splitter
            .finish()
            .into_iter()
            .map(|(p, body)| (p, cluster::with_origin(&origin, &body)))
            .collect();
        let produced = tokio::runtime::Handle::current().block_on(front.produce(records));
        produced
            .map(|offsets| cluster_read::note_produced(&offsets))
            .map_err(|e| {
                tracing::warn!(error = %e, "produce failed");
                ServeError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("Kafka did not acknowledge the write: {e}"),
                )
            })
    }
}

/// The read and status routes of a node in a cluster, or the single-node reads.
pub fn read_routes(app: &Shared) -> Router<Shared> {
    let Some(role) = &app.cluster else {
        return Router::new()
            .route("/api/strata/v1/find", get(read::find))
            .route(
                "/api/strata/v1/fetch",
                get(read::fetch_get).post(read::fetch_post),
            );
    };
    let mut router = Router::new()
        .route("/api/strata/v1/cluster/status", get(status))
        .route("/api/strata/v1/cluster/p/{n}/find", get(partition_find))
        .route("/api/strata/v1/cluster/p/{n}/fetch", get(partition_fetch))
        .route(
            "/api/strata/v1/cluster/p/{n}/snapshot",
            get(super::cluster_ops::snapshot),
        )
        .route(
            "/api/strata/v1/cluster/restart",
            axum::routing::post(super::cluster_ops::restart),
        );
    router = cluster_read::partition_routes(router);
    if role.is_front() {
        router = router
            .route("/api/strata/v1/find", get(fanout_find))
            .route("/api/strata/v1/fetch", get(fanout_fetch));
    }
    router
}

type Params = std::collections::HashMap<String, String>;

async fn partition_find(
    State(app): State<Shared>,
    Path(n): Path<u32>,
    Query(mut params): Query<Params>,
) -> Response {
    match cluster_read::fresh(&app, n, &mut params).await {
        Ok(p) => read::find(State(p), Query(params)).await,
        Err(r) => r,
    }
}

async fn partition_fetch(
    State(app): State<Shared>,
    Path(n): Path<u32>,
    Query(mut params): Query<Params>,
) -> Response {
    match cluster_read::fresh(&app, n, &mut params).await {
        Ok(p) => read::fetch_get(State(p), Query(params)).await,
        Err(r) => r,
    }
}

/// This node's partitions: applied offsets, Kafka's end offsets, lag, failures.
async fn status(State(app): State<Shared>) -> Response {
    let Some(role) = &app.cluster else {
        return error(StatusCode::NOT_FOUND, "not a cluster node");
    };
    let partitions: Vec<Value> = role.storage.as_ref().map_or_else(Vec::new, |s| {
        s.status()
            .into_iter()
            .map(|p| {
                json!({
                    "partition": p.partition,
                    "next_offset": p.next_offset,
                    "end_offset": p.end_offset,
                    "lag": if p.end_offset < 0 { Value::Null } else {
                        json!((p.end_offset - p.next_offset).max(0))
                    },
                    "duplicates": p.duplicates,
                    "refused": p.refused,
                    "samples_applied": p.samples_applied,
                    "samples_refused": p.samples_refused,
                    "series_refused": p.series_refused.iter().sum::<u64>(),
                    "health": if p.failed.is_some() { "failed" } else { "ok" },
                    "error": p.failed,
                    "state": p.state,
                    "copied_from": p.copied_from,
                })
            })
            .collect()
    });
    let roles: Vec<&str> = role
        .node
        .roles
        .iter()
        .map(|r| match r {
            Role::Front => "front",
            Role::Storage => "storage",
        })
        .collect();
    json_response(
        StatusCode::OK,
        json!({
            "node": role.node.name,
            "side": role.node.side,
            "started_ms": role.own_epoch,
            "roles": roles,
            "partitions": partitions,
        }),
    )
}

async fn fanout_find(
    State(app): State<Shared>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    match cluster_read::native_fanout(app, "find", query.unwrap_or_default(), headers).await {
        Ok(answers) => {
            let joined: Vec<Value> = answers
                .into_iter()
                .flat_map(|a| match a {
                    Value::Array(items) => items,
                    _ => Vec::new(),
                })
                .collect();
            json_response(StatusCode::OK, Value::Array(joined))
        }
        Err(r) => r,
    }
}

async fn fanout_fetch(
    State(app): State<Shared>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let answers =
        match cluster_read::native_fanout(app, "fetch", query.unwrap_or_default(), headers).await {
            Ok(a) => a,
            Err(r) => return r,
        };
    let mut head = answers.first().cloned().unwrap_or_else(|| json!({}));
    let truncated = answers
        .iter()
        .any(|a| a["truncated"].as_bool() == Some(true));
    let series: Vec<Value> = answers
        .into_iter()
        .flat_map(|mut a| match a["series"].take() {
            Value::Array(items) => items,
            _ => Vec::new(),
        })
        .collect();
    head["truncated"] = json!(truncated);
    head["series"] = Value::Array(series);
    json_response(StatusCode::OK, head)
}
