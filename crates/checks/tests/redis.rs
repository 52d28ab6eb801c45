//! redis against Debian's redis-server (installed when missing), started on a free loopback
//! port in a temp dir: INFO fields equal to a separate INFO read by redis-cli, keyspace hits
//! and misses from a known workload, LATENCY HISTOGRAM calls, and a timed PING.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};

use checks::Value;
use common::*;
use hist::convert::Cumulative;
use serde_json::json;

fn redis_server(dir: &std::path::Path, extra: &[&str]) -> (Service, u16) {
    ensure_packages("/usr/bin/redis-server", &["redis-server"]);
    let port = free_port();
    let child = Command::new("/usr/bin/redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ])
        .args(["--port", &port.to_string()])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let service = Service(child);
    wait_for_port(port, "redis-server");
    (service, port)
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "redis-cli {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

fn info_map(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test]
async fn redis_info_and_latency_histograms_match_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = redis_server(dir.path(), &[]);
    for i in 0..4 {
        cli(port, &["SET", &format!("key{i}"), "v"]);
    }
    for i in 0..5 {
        cli(port, &["GET", &format!("key{}", i % 4)]);
    }
    for i in 0..3 {
        cli(port, &["GET", &format!("missing{i}")]);
    }
    let ms = run_ok(&spec("redis", &format!("127.0.0.1:{port}"), json!({}))).await;
    let info = info_map(&cli(port, &["INFO"]));
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(samples(&ms, "ping_time"), 1);
    assert_eq!(numeric(&ms, "keyspace_hits"), 5.0);
    assert_eq!(numeric(&ms, "keyspace_misses"), 3.0);
    // Fields a second INFO read reports the same (no counter the INFO itself moves).
    for field in [
        "keyspace_hits",
        "keyspace_misses",
        "tcp_port",
        "maxmemory",
        "expired_keys",
    ] {
        assert_eq!(
            numeric(&ms, field),
            info[field].parse::<f64>().unwrap(),
            "{field}"
        );
    }
    for field in ["redis_version", "role", "redis_mode"] {
        assert_eq!(text(&ms, field), info[field], "{field}");
    }
    assert_eq!(numeric_tagged(&ms, "keys", &[("db", "db0")]), 4.0);
    assert!(numeric(&ms, "used_memory") > 0.0);
    assert!(has(&ms, "instantaneous_ops_per_sec") && has(&ms, "connected_clients"));
    // LATENCY HISTOGRAM (Redis 7): per-command calls and a cumulative histogram with them all.
    assert_eq!(numeric_tagged(&ms, "calls", &[("command", "set")]), 4.0);
    assert_eq!(numeric_tagged(&ms, "calls", &[("command", "get")]), 8.0);
    match &find(&ms, "command_latency", &[("command", "get")])
        .unwrap()
        .value
    {
        Value::Cumulative(c @ Cumulative::Bounded(b)) => {
            assert_eq!(c.count(), 8);
            assert_eq!(b.counts.iter().sum::<u64>(), 8);
            assert_eq!(b.bounds[0], 1e-6);
        }
        other => panic!("command_latency: {other:?}"),
    }
    assert_spec_tags(&ms);
}

#[tokio::test]
async fn redis_auth_and_failures_are_measured() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = redis_server(dir.path(), &["--requirepass", "s3cret"]);
    let target = format!("127.0.0.1:{port}");
    let ms = run_ok(&spec("redis", &target, json!({}))).await;
    assert_eq!(numeric(&ms, "up"), 0.0);
    let status = text(&ms, "status");
    assert!(
        status.starts_with("PING answered error: NOAUTH"),
        "{status}"
    );
    let ms = run_ok(&spec("redis", &target, json!({"password": "s3cret"}))).await;
    assert_eq!(text(&ms, "status"), "ok");
    let ms = run_ok(&spec("redis", &target, json!({"password": "wrong"}))).await;
    let status = text(&ms, "status");
    assert!(status.starts_with("AUTH answered error:"), "{status}");
    let ms = run_ok(&spec(
        "redis",
        &format!("127.0.0.1:{}", free_port()),
        json!({}),
    ))
    .await;
    assert_eq!(text(&ms, "status"), "connect refused");
}
