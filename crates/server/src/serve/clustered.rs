//! `strata serve --cluster cluster.toml --node NAME`: this process's part of a cluster.
//!
//! A front turns each ingest request into one record per partition it touches and answers 2xx
//! once Kafka acknowledged every one (`App::store_inserted` calls [`ClusterRole::produce`]
//! instead of the local store). A storage node consumes its partitions into stores of their own
//! and answers reads on each at `/api/strata/v1/cluster/p/{n}/find|fetch`. A front's
//! `/api/strata/v1/find` and `/fetch` ask one owner of every partition (an up-to-date one, its
//! own side first; any that answers when none is) and join the answers: a stream lives in exactly one partition, so
//! the series lists are disjoint and joining them is exact.

// A helper's early answer is the whole response; boxing it buys nothing here.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Path, Query, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use cluster::{Role, Splitter, Topology};
use serde_json::{json, Value};
use store::{KeyRef, Origin, SourceId, Store, WriteBatch};

use super::reply::{error, json_response, ServeError};
use super::{read, Shared};

/// The parameter a front adds to its first choice of owner: answer only if at most this many
/// records behind Kafka's end of the partition.
const LAG_PARAM: &str = "lag_max";
/// Records an owner may be behind and still count as up to date.
const LAG_RECORDS_MAX: i64 = 100;
/// How long a front waits for one storage node's answer to a read, in ms.
const PEER_TIMEOUT_MS: u64 = 30_000;

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
        tokio::runtime::Handle::current()
            .block_on(front.produce(records))
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
        .route("/api/strata/v1/cluster/p/{n}/fetch", get(partition_fetch));
    if role.is_front() {
        router = router
            .route("/api/strata/v1/find", get(fanout_find))
            .route("/api/strata/v1/fetch", get(fanout_fetch));
    }
    router
}

type Params = std::collections::HashMap<String, String>;

/// The reading `App` of partition `n`, unless the request asks for an owner at most `lag_max`
/// records behind and this one is further behind, or its consumer stopped (503: ask another).
fn partition_app(app: &Shared, n: u32, params: &mut Params) -> Result<Shared, Response> {
    let role = app.cluster.as_ref();
    if let Some(text) = params.remove(LAG_PARAM) {
        let Ok(lag_max) = text.trim().parse::<i64>() else {
            return Err(error(
                StatusCode::BAD_REQUEST,
                format!("parameter `{LAG_PARAM}`: `{text}` is not a whole number"),
            ));
        };
        let status = role
            .and_then(|r| r.storage.as_ref())
            .and_then(|s| s.status().into_iter().find(|p| p.partition == n));
        if let Some(p) = status {
            let lag = p.end_offset - p.next_offset;
            if p.failed.is_some() || p.end_offset < 0 || lag > lag_max {
                return Err(error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("partition {n} here is not up to date ({lag} records behind)"),
                ));
            }
        }
    }
    match role.and_then(|r| r.partition_apps.get(&n)) {
        Some(p) => Ok(p.clone()),
        None => Err(error(
            StatusCode::NOT_FOUND,
            format!("partition {n} is not owned by this node"),
        )),
    }
}

async fn partition_find(
    State(app): State<Shared>,
    Path(n): Path<u32>,
    Query(mut params): Query<Params>,
) -> Response {
    match partition_app(&app, n, &mut params) {
        Ok(p) => read::find(State(p), Query(params)).await,
        Err(r) => r,
    }
}

async fn partition_fetch(
    State(app): State<Shared>,
    Path(n): Path<u32>,
    Query(mut params): Query<Params>,
) -> Response {
    match partition_app(&app, n, &mut params) {
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
            "roles": roles,
            "partitions": partitions,
        }),
    )
}

/// Asks the owners of `partition` in turn (own side first) until one answers 200; a 4xx is
/// the request's own fault and is returned at once.
fn ask_partition(
    app: &Shared,
    partition: u32,
    what: &str,
    query: &str,
) -> Result<Value, (StatusCode, String)> {
    let Some(role) = &app.cluster else {
        return Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            "not a cluster node".into(),
        ));
    };
    let mut owners = role.topology.owners(partition);
    owners.sort_by_key(|n| n.side != role.node.side);
    let token = app.config.auth.token.as_deref();
    let mut failures = Vec::new();
    // First an owner that is up to date (own side first); then, when none is, any that answers:
    // an answer a little behind beats none.
    let fresh = format!(
        "/api/strata/v1/cluster/p/{partition}/{what}?{query}&{LAG_PARAM}={LAG_RECORDS_MAX}"
    );
    let any = format!("/api/strata/v1/cluster/p/{partition}/{what}?{query}");
    let attempts = owners
        .iter()
        .map(|o| (o, &fresh))
        .chain(owners.iter().map(|o| (o, &any)));
    for (owner, path) in attempts {
        match crate::cli_cluster::peer_get(&owner.http, path, token, PEER_TIMEOUT_MS) {
            Ok((200, body)) => {
                return serde_json::from_slice(&body).map_err(|e| {
                    let m = format!(
                        "node {} answered partition {partition} with bad JSON: {e}",
                        owner.name
                    );
                    (StatusCode::BAD_GATEWAY, m)
                })
            }
            Ok((status, body)) if (400..500).contains(&status) && status != 404 => {
                let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let m = v["error"].as_str().unwrap_or("refused").to_owned();
                let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
                return Err((code, m));
            }
            Ok((status, _)) => failures.push(format!("{}: HTTP {status}", owner.name)),
            Err(e) => failures.push(format!("{}: {e}", owner.name)),
        }
    }
    Err((
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "no owner of partition {partition} answered ({})",
            failures.join("; ")
        ),
    ))
}

/// Every partition's answer, in partition order.
async fn fanout(app: Shared, what: &'static str, query: String) -> Result<Vec<Value>, Response> {
    let partitions = app
        .cluster
        .as_ref()
        .map_or(0, |r| r.topology.kafka.partitions);
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..partitions {
        let (app, query) = (app.clone(), query.clone());
        tasks.spawn_blocking(move || (p, ask_partition(&app, p, what, &query)));
    }
    let mut answers = BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((p, Ok(v))) => {
                answers.insert(p, v);
            }
            Ok((_, Err((status, m)))) => return Err(error(status, m)),
            Err(e) => {
                return Err(error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("read task: {e}"),
                ))
            }
        }
    }
    Ok(answers.into_values().collect())
}

async fn fanout_find(State(app): State<Shared>, RawQuery(query): RawQuery) -> Response {
    match fanout(app, "find", query.unwrap_or_default()).await {
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

async fn fanout_fetch(State(app): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let answers = match fanout(app, "fetch", query.unwrap_or_default()).await {
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
