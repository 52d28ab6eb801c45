//! Cluster operations on a node: a partition's snapshot for a peer that now owns it (or lost its
//! disk), the restart that makes a process take an edited topology file, copying partitions
//! from peers when a storage node opens, and handing a partition it no longer owns to its new
//! owner once that one caught up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::reply::{error, json_response};
use super::Shared;

/// Set by a restart request: once the server stopped, the process runs itself again.
static RESTART_REQUESTED: AtomicBool = AtomicBool::new(false);
/// How long a node waits for a peer's snapshot of one partition, in ms.
const SNAPSHOT_TIMEOUT_MS: u64 = 120_000;
/// How long a node waits for a peer's status, in ms.
const STATUS_TIMEOUT_MS: u64 = 2_000;
/// How often a node asks the new owners of its leaving partitions whether they caught up, in ms.
const HANDOFF_POLL_MS: u64 = 1_000;
/// Pause between answering a restart request and stopping, in ms (the answer gets out).
const RESTART_DELAY_MS: u64 = 100;

/// `GET /api/strata/v1/cluster/p/{n}/snapshot`: partition `n` flushed, with its offset, as one
/// checked stream (`crates/cluster/FORMAT.md`).
pub async fn snapshot(State(app): State<Shared>, Path(n): Path<u32>) -> Response {
    let partition = app
        .cluster
        .as_ref()
        .and_then(|r| r.storage.as_ref())
        .and_then(|s| s.partitions.get(&n).cloned());
    let Some(partition) = partition else {
        return error(
            StatusCode::NOT_FOUND,
            format!("partition {n} is not held by this node"),
        );
    };
    match tokio::task::spawn_blocking(move || cluster::build_snapshot(&partition)).await {
        Ok(Ok((offset, bytes))) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                (
                    header::HeaderName::from_static("strata-kafka-offset"),
                    offset.to_string(),
                ),
            ],
            bytes,
        )
            .into_response(),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("snapshot task: {e}"),
        ),
    }
}

/// `POST /api/strata/v1/cluster/restart`: stop as on SIGTERM (requests finish, partitions are
/// checkpointed), then run again with the same arguments, reading the topology file anew.
pub async fn restart(State(app): State<Shared>) -> Response {
    let Some(role) = &app.cluster else {
        return error(StatusCode::NOT_FOUND, "not a cluster node");
    };
    RESTART_REQUESTED.store(true, Ordering::Release);
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(RESTART_DELAY_MS)).await;
        let me = rustix::process::getpid();
        if let Err(e) = rustix::process::kill_process(me, rustix::process::Signal::TERM) {
            tracing::error!(error = %e, "restart: cannot signal this process");
        }
    });
    json_response(
        StatusCode::ACCEPTED,
        json!({"node": role.node.name, "restarting": true}),
    )
}

/// After the server stopped: when a restart was asked for, replaces this process with a new run
/// of the same binary and arguments (same pid); returns only when that failed.
pub fn exec_if_restart_requested() {
    if !RESTART_REQUESTED.load(Ordering::Acquire) {
        return;
    }
    use std::os::unix::process::CommandExt as _;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("strata serve: restart: cannot find this binary: {e}");
            return;
        }
    };
    // A binary replaced since the start (an upgrade) shows as `<path> (deleted)`: run the
    // file now at that path.
    let shown = exe.to_string_lossy().into_owned();
    let exe = shown
        .strip_suffix(" (deleted)")
        .map_or(exe, std::path::PathBuf::from);
    let e = std::process::Command::new(exe).args(args).exec();
    eprintln!("strata serve: restart: {e}");
}

/// The storage nodes other than `me` that answer `/health` now. A node that is starting has
/// its port bound but does not answer until its own partitions are open: asking it for a
/// snapshot would wait out the snapshot timeout, and nodes of a new cluster started together
/// would wait on each other for minutes.
fn serving_peers(topology: &cluster::Topology, me: &str, token: Option<&str>) -> Vec<String> {
    topology
        .nodes
        .iter()
        .filter(|n| n.name != me && n.has(cluster::Role::Storage))
        .filter(|n| {
            let got = crate::cli_cluster::peer_get(&n.http, "/health", token, STATUS_TIMEOUT_MS);
            matches!(got, Ok((200, _)))
        })
        .map(|n| n.name.clone())
        .collect()
}

/// Partition `p`'s copy from the first serving peer that holds it: the other sides' owners
/// first, then every other storage node of the topology (a node it moved from).
fn copy_from_peers(
    topology: &cluster::Topology,
    serving: &[String],
    token: Option<&str>,
    p: u32,
) -> Option<cluster::PeerCopy> {
    let owners = topology.owners(p);
    let others = topology
        .nodes
        .iter()
        .filter(|n| n.has(cluster::Role::Storage) && !owners.iter().any(|o| o.name == n.name));
    let candidates = owners
        .iter()
        .copied()
        .chain(others)
        .filter(|n| serving.contains(&n.name));
    let path = format!("/api/strata/v1/cluster/p/{p}/snapshot");
    let bytes_max = cluster::SNAPSHOT_BYTES_MAX + (1 << 20);
    for peer in candidates {
        let got = crate::cli_cluster::peer_get_max(
            &peer.http,
            &path,
            token,
            SNAPSHOT_TIMEOUT_MS,
            bytes_max,
        );
        match got {
            Ok((200, body)) => return Some((peer.name.clone(), body)),
            Ok((status, _)) => {
                tracing::info!(partition = p, peer = %peer.name, status, "no copy from this peer")
            }
            Err(e) => {
                tracing::info!(partition = p, peer = %peer.name, error = %e, "no copy from this peer")
            }
        }
    }
    None
}

/// Opens this node's partitions, copying the ones it owns and lacks from peers.
pub async fn open_storage(
    topology: &cluster::Topology,
    node: &str,
    dir: std::path::PathBuf,
    options: &store::StoreOptions,
    token: Option<String>,
) -> Result<cluster::StorageNode, String> {
    let (t, n, o) = (topology.clone(), node.to_owned(), options.clone());
    tokio::task::spawn_blocking(move || {
        let serving = serving_peers(&t, &n, token.as_deref());
        let copy = |p| copy_from_peers(&t, &serving, token.as_deref(), p);
        cluster::open_storage(&t, &n, &dir, &o, &copy)
    })
    .await
    .map_err(|e| format!("opening the partition stores: {e}"))?
}

/// Hands each leaving partition to this side's new owner once that one has applied at least as
/// far as this node; runs until `stop`.
pub async fn hand_off_leaving(
    storage: Arc<cluster::StorageNode>,
    topology: cluster::Topology,
    side: String,
    token: Option<String>,
    mut stop: watch::Receiver<bool>,
) {
    while !storage.leaving().is_empty() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(HANDOFF_POLL_MS)) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        for p in storage.leaving() {
            let Some(owner) = topology.owners(p).into_iter().find(|o| o.side == side) else {
                continue;
            };
            let (applied, _) = storage.partitions[&p].offsets();
            let (http, token) = (owner.http.clone(), token.clone());
            let theirs =
                tokio::task::spawn_blocking(move || applied_by(&http, token.as_deref(), p)).await;
            if matches!(theirs, Ok(Some(next)) if next >= applied) {
                if let Err(e) = storage.hand_off(p) {
                    tracing::warn!(partition = p, error = %e, "hand-off failed");
                }
            }
        }
    }
}

/// How far `http` has applied partition `p` when it owns it and is healthy.
fn applied_by(http: &str, token: Option<&str>, p: u32) -> Option<i64> {
    let path = "/api/strata/v1/cluster/status";
    let (status, body) = crate::cli_cluster::peer_get(http, path, token, STATUS_TIMEOUT_MS).ok()?;
    if status != 200 {
        return None;
    }
    let answer: Value = serde_json::from_slice(&body).ok()?;
    let part = answer["partitions"]
        .as_array()?
        .iter()
        .find(|x| x["partition"] == json!(p))?;
    let fetched = part["end_offset"].as_i64() >= Some(0);
    let healthy = part["health"] == "ok" && part["state"] == "owned" && fetched;
    healthy.then(|| part["next_offset"].as_i64()).flatten()
}
