//! `strata cluster status --cluster cluster.toml`: every partition's owners, how far each has
//! applied the partition's Kafka log, its lag and health, asked of every node in the topology.

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

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Partitions, their owners, applied offsets, lag and health.
    Status(StatusArgs),
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
    }
}

/// One GET to a node: its status and body.
pub fn peer_get(
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout_ms: u64,
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
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        request.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    request.push_str("\r\n");
    conn.write_all(request.as_bytes()).map_err(io)?;
    let (status, _, body) =
        crate::cli_query::read_response(conn, addr, PEER_ANSWER_BYTES_MAX).map_err(|(_, m)| m)?;
    Ok((status, body))
}

/// Prints the status; Ok(true) when every partition has a healthy owner on every side.
fn status(args: &StatusArgs) -> Result<bool, String> {
    let topology = cluster::Topology::load(&args.cluster).map_err(|e| e.to_string())?;
    let mut nodes = Vec::new();
    for node in &topology.nodes {
        let path = "/api/strata/v1/cluster/status";
        let answer = peer_get(&node.http, path, args.token.as_deref(), STATUS_TIMEOUT_MS).and_then(
            |(code, body)| match code {
                200 => serde_json::from_slice::<Value>(&body).map_err(|e| e.to_string()),
                other => Err(format!("HTTP {other}")),
            },
        );
        nodes.push((node, answer));
    }
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
                    let health = part["health"].as_str().unwrap_or("missing").to_owned();
                    json!({
                        "partition": p, "side": owner.side, "owner": owner.name,
                        "applied": part["next_offset"], "end": part["end_offset"],
                        "lag": part["lag"], "duplicates": part["duplicates"],
                        "refused": part["refused"], "series_refused": part["series_refused"],
                        "samples_refused": part["samples_refused"],
                        "health": health, "error": part["error"],
                    })
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
    if args.json {
        println!("{}", Value::Array(rows));
        return Ok(healthy);
    }
    println!("partition\tside\towner\tapplied\tend\tlag\tseries refused\thealth");
    let cell = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    for r in &rows {
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            cell(&r["partition"]),
            cell(&r["side"]),
            cell(&r["owner"]),
            cell(&r["applied"]),
            cell(&r["end"]),
            cell(&r["lag"]),
            cell(&r["series_refused"]),
            cell(&r["health"])
        );
    }
    Ok(healthy)
}
