//! `strata cluster status --cluster cluster.toml`: every partition's owners, how far each has
//! applied the partition's Kafka log, its lag and health, asked of every node in the topology.
//! `strata cluster apply --cluster cluster.toml`: every running node of an edited topology
//! restarts in turn and takes it (partitions move: new owners copy them from peers).

use std::io::Write as _;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

/// Largest answer read from one node, in bytes.
const PEER_ANSWER_BYTES_MAX: u64 = 256 << 20;
/// How long `status` waits for each node, in ms.
const STATUS_TIMEOUT_MS: u64 = 5_000;
/// How long `apply` waits for one node to come back after its restart, in s (it copies the
/// partitions it newly owns before it listens again).
const RESTART_WAIT_S_MAX: u64 = 600;
/// How long `apply` waits, after the last restart, for every partition to be caught up and
/// handed off, in s.
const SETTLE_WAIT_S_MAX: u64 = 600;
/// Pause between two looks at a node or the cluster while `apply` waits, in ms.
const POLL_MS: u64 = 250;

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Partitions, their owners, applied offsets, lag and health.
    Status(StatusArgs),
    /// Make every running node take an edited topology file: each restarts in turn (new
    /// nodes must be started first; removed nodes are stopped after).
    Apply(StatusArgs),
}

#[derive(Args)]
pub struct StatusArgs {
    /// The topology file.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Bearer token of the nodes (`auth.token`).
    #[arg(long, env = "STRATA_TOKEN")]
    pub token: Option<String>,
}

pub fn run(command: ClusterCommand) -> ExitCode {
    match command {
        ClusterCommand::Status(args) => match status(&args) {
            Ok(healthy) => {
                if healthy {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("strata cluster status: {e}");
                ExitCode::from(2)
            }
        },
        ClusterCommand::Apply(args) => match apply(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("strata cluster apply: {e}");
                ExitCode::from(1)
            }
        },
    }
}

/// A node's status answer, or why there is none.
fn node_status(http: &str, token: Option<&str>) -> Result<Value, String> {
    let path = "/api/strata/v1/cluster/status";
    let (code, body) = peer_get(http, path, token, STATUS_TIMEOUT_MS)?;
    match code {
        200 => serde_json::from_slice::<Value>(&body).map_err(|e| e.to_string()),
        other => Err(format!("HTTP {other}")),
    }
}

/// Restarts the nodes of the file one side at a time (the other sides keep taking writes and
/// answering reads), waiting for each to answer again (a new start), then for every partition
/// to be applied by its owners with nothing left to hand off.
fn apply(args: &StatusArgs) -> Result<(), String> {
    let topology = cluster::Topology::load(&args.cluster).map_err(|e| e.to_string())?;
    let token = args.token.as_deref();
    let mut started = Vec::new();
    for node in &topology.nodes {
        let answer = node_status(&node.http, token).map_err(|e| {
            format!(
                "node {} ({}) does not answer ({e}): start it first with `strata serve \
                 --cluster {} --node {}`",
                node.name,
                node.http,
                args.cluster.display(),
                node.name
            )
        })?;
        started.push((node, answer["started_ms"].clone()));
    }
    for side in topology.sides() {
        let on_side: Vec<_> = started.iter().filter(|(n, _)| n.side == side).collect();
        for (node, _) in &on_side {
            ask_restart(node, token)?;
        }
        for (node, before) in &on_side {
            wait_restarted(node, token, before)?;
            println!("{}: restarted with the new topology", node.name);
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(SETTLE_WAIT_S_MAX);
    loop {
        let (rows, healthy) = rows(&topology, token);
        let fetched = rows.iter().all(|r| r["end"].as_i64() >= Some(0));
        if healthy && fetched {
            print_rows(&rows);
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            print_rows(&rows);
            return Err(format!(
                "partitions not settled after {SETTLE_WAIT_S_MAX} s (see the table)"
            ));
        }
        std::thread::sleep(Duration::from_millis(POLL_MS * 4));
    }
}

fn ask_restart(node: &cluster::Node, token: Option<&str>) -> Result<(), String> {
    let path = "/api/strata/v1/cluster/restart";
    match peer_request(
        "POST",
        &node.http,
        (path, None),
        token,
        STATUS_TIMEOUT_MS,
        1 << 20,
    ) {
        Ok((202, _)) => Ok(()),
        Ok((code, body)) => {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let why = v["error"].as_str().unwrap_or("refused").to_owned();
            Err(format!("node {}: HTTP {code}: {why}", node.name))
        }
        Err(e) => Err(format!("node {}: {e}", node.name)),
    }
}

fn wait_restarted(node: &cluster::Node, token: Option<&str>, before: &Value) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(RESTART_WAIT_S_MAX);
    loop {
        if let Ok(answer) = node_status(&node.http, token) {
            if &answer["started_ms"] != before {
                return Ok(());
            }
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "node {} did not come back within {RESTART_WAIT_S_MAX} s",
                node.name
            ));
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// One GET to a node: its status and body.
pub fn peer_get(
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout_ms: u64,
) -> Result<(u16, Vec<u8>), String> {
    peer_request(
        "GET",
        addr,
        (path, None),
        token,
        timeout_ms,
        PEER_ANSWER_BYTES_MAX,
    )
}

/// One GET to a node whose answer may be up to `bytes_max` long.
pub fn peer_get_max(
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout_ms: u64,
    bytes_max: u64,
) -> Result<(u16, Vec<u8>), String> {
    peer_request("GET", addr, (path, None), token, timeout_ms, bytes_max)
}

/// One HTTP/1.1 request to a peer: GET, or POST with an optional JSON body; bounded in time
/// (connect, each read and write) and in the answer's size.
pub fn peer_request(
    method: &str,
    addr: &str,
    (path, body): (&str, Option<&[u8]>),
    token: Option<&str>,
    timeout_ms: u64,
    bytes_max: u64,
) -> Result<(u16, Vec<u8>), String> {
    let timeout = Duration::from_millis(timeout_ms);
    let sock = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr}: no address"))?;
    let mut conn = TcpStream::connect_timeout(&sock, timeout)
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let io = |e: std::io::Error| format!("talking to {addr}: {e}");
    conn.set_read_timeout(Some(timeout)).map_err(io)?;
    conn.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        request.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    match body {
        Some(b) => request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            b.len()
        )),
        None => request.push_str("Content-Length: 0\r\n\r\n"),
    }
    conn.write_all(request.as_bytes()).map_err(io)?;
    if let Some(b) = body {
        conn.write_all(b).map_err(io)?;
    }
    let (status, _, answer) =
        crate::cli_query::read_response(conn, addr, bytes_max).map_err(|(_, m)| m)?;
    Ok((status, answer))
}

/// Prints the status; Ok(true) when every partition has a healthy owner on every side.
fn status(args: &StatusArgs) -> Result<bool, String> {
    let topology = cluster::Topology::load(&args.cluster).map_err(|e| e.to_string())?;
    let (rows, healthy) = rows(&topology, args.token.as_deref());
    if args.json {
        println!("{}", Value::Array(rows));
    } else {
        print_rows(&rows);
    }
    Ok(healthy)
}

/// One row per partition and owner, then one per copy a node still serves without owning it
/// (leaving: until its new owner caught up); true when every owner is healthy and caught up with nothing left leaving.
fn rows(topology: &cluster::Topology, token: Option<&str>) -> (Vec<Value>, bool) {
    let nodes: Vec<_> = topology
        .nodes
        .iter()
        .map(|n| (n, node_status(&n.http, token)))
        .collect();
    let mut rows = Vec::new();
    let mut healthy = true;
    for p in 0..topology.kafka.partitions {
        for owner in topology.owners(p) {
            let found = nodes.iter().find(|(n, _)| n.name == owner.name);
            let row = match found.map(|(_, a)| a) {
                Some(Ok(answer)) => {
                    let part = answer["partitions"]
                        .as_array()
                        .and_then(|ps| ps.iter().find(|x| x["partition"] == json!(p)))
                        .cloned()
                        .unwrap_or(Value::Null);
                    row(p, owner, &part)
                }
                Some(Err(e)) => json!({
                    "partition": p, "side": owner.side, "owner": owner.name,
                    "health": "unreachable", "error": e,
                }),
                None => Value::Null,
            };
            healthy &= row["health"] == json!("ok");
            rows.push(row);
        }
    }
    for (node, answer) in &nodes {
        let Ok(answer) = answer else { continue };
        let held = answer["partitions"].as_array().cloned().unwrap_or_default();
        for part in held.iter().filter(|x| x["state"] == "leaving") {
            let p = part["partition"].as_u64().unwrap_or(0) as u32;
            healthy = false;
            rows.push(row(p, node, part));
        }
    }
    (rows, healthy)
}

fn row(p: u32, node: &cluster::Node, part: &Value) -> Value {
    let health = part["health"].as_str().unwrap_or("missing").to_owned();
    json!({
        "partition": p, "side": node.side, "owner": node.name,
        "applied": part["next_offset"], "end": part["end_offset"],
        "lag": part["lag"], "duplicates": part["duplicates"],
        "refused": part["refused"], "series_refused": part["series_refused"],
        "samples_refused": part["samples_refused"],
        "health": health, "error": part["error"],
        "state": part["state"], "copied_from": part["copied_from"],
    })
}

fn print_rows(rows: &[Value]) {
    println!("partition\tside\towner\tapplied\tend\tlag\tseries refused\thealth\tstate");
    let cell = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    for r in rows {
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            cell(&r["partition"]),
            cell(&r["side"]),
            cell(&r["owner"]),
            cell(&r["applied"]),
            cell(&r["end"]),
            cell(&r["lag"]),
            cell(&r["series_refused"]),
            cell(&r["health"]),
            cell(&r["state"])
        );
    }
}
