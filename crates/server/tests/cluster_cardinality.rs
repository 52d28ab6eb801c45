//! Cardinality limits in a cluster: enforced by each partition's store as it applies Kafka's
//! records (a front has no store that knows which series exist), decided from the record alone,
//! so both sides' replicas refuse exactly the same series. A burst of new series past the limit
//! is answered 2xx by the front (its records were in Kafka); afterwards each partition holds at
//! most its share of the limit, both sides hold the same series and samples, and the refusals
//! are in `strata cluster status` and in each storage node's `/metrics`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_common;
mod serve_common;

use std::sync::atomic::AtomicU64;

use cluster_common::{send_until_acked, Cluster, Kafka};
use serde_json::Value;
use serve_common::{client, get_json, now_s, urlencode, Server};

const PARTITIONS: u32 = 2;
/// The configured limit; each partition admits `LIMIT / PARTITIONS` new series a minute.
const LIMIT: usize = 40;
/// New series the burst sends, in `REQUESTS` requests.
const SERIES: usize = 200;
const REQUESTS: usize = 4;

fn start(cluster: &Cluster, node: &str, config: &std::path::Path) -> Server {
    Server::start(
        &cluster.root.join(node),
        &[
            "--cluster",
            cluster.topology.to_str().unwrap(),
            "--node",
            node,
            "--config",
            config.to_str().unwrap(),
            "--statsd",
            "off",
            "--graphite",
            "off",
        ],
    )
}

/// The keys of partition `p` as the node at `http` holds them, sorted, and their samples.
fn partition_contents(http: &str, p: u32, start: i64, end: i64) -> (Vec<String>, Value) {
    let found = get_json(&format!(
        "http://{http}/api/strata/v1/cluster/p/{p}/find?query={}",
        urlencode("and(__name:burst_v)")
    ));
    let mut keys: Vec<String> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    let mut fetched = get_json(&format!(
        "http://{http}/api/strata/v1/cluster/p/{p}/fetch?query={}&start={start}&end={end}&period=60",
        urlencode("and(__name:burst_v)")
    ));
    let series = fetched["series"].as_array_mut().unwrap();
    for s in series.iter_mut() {
        s.as_object_mut().unwrap().remove("activity_ms");
    }
    series.sort_by(|a, b| a["key"].as_str().cmp(&b["key"].as_str()));
    (keys, fetched)
}

#[test]
fn both_sides_refuse_the_same_series_past_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let kafka = Kafka::start(&tmp.path().join("kafka"), 1);
    let cluster = Cluster::two_nodes(tmp.path(), &kafka, PARTITIONS);
    let config = tmp.path().join("strata.toml");
    std::fs::write(
        &config,
        format!("[cardinality]\nseries_new_per_minute_max = {LIMIT}\n"),
    )
    .unwrap();
    let _a1 = start(&cluster, "a1", &config);
    let _b1 = start(&cluster, "b1", &config);
    let front = cluster.http("a1");

    let ts_s = now_s() - 60;
    let stall_ms = AtomicU64::new(0);
    let per_request = SERIES / REQUESTS;
    for r in 0..REQUESTS {
        let lines: Vec<String> = (r * per_request..(r + 1) * per_request)
            .map(|j| format!("burst,k=s{j} v={j} {}", ts_s * 1_000_000_000))
            .collect();
        // Acknowledged, refused series or not: the front cannot know.
        send_until_acked(
            std::slice::from_ref(&front),
            r as u64,
            "/api/v2/write?precision=ns",
            &lines.join("\n"),
            &stall_ms,
        );
    }
    cluster.wait_caught_up();

    let (start_s, end_s) = (ts_s - 120, ts_s + 120);
    let share = LIMIT.div_ceil(PARTITIONS as usize);
    let mut admitted = 0;
    let topology = cluster::Topology::load(&cluster.topology).unwrap();
    for p in 0..PARTITIONS {
        let owners = topology.owners(p);
        assert_eq!(owners.len(), 2);
        let a = partition_contents(&owners[0].http, p, start_s, end_s);
        let b = partition_contents(&owners[1].http, p, start_s, end_s);
        assert_eq!(a, b, "partition {p}: the sides hold different series");
        assert!(
            a.0.len() <= share,
            "partition {p}: {} series, more than its share {share} of the limit",
            a.0.len()
        );
        admitted += a.0.len();
    }
    // The burst hashes over both partitions: each filled its share.
    assert_eq!(admitted, LIMIT, "series admitted in all");

    // Refusals: the same on both sides, in the status and in each node's metrics.
    let rows = cluster.status();
    let mut refused_samples = 0;
    for p in 0..PARTITIONS {
        let per_side: Vec<&Value> = rows.iter().filter(|r| r["partition"] == p).collect();
        assert_eq!(per_side.len(), 2, "{rows:?}");
        assert_eq!(per_side[0]["series_refused"], per_side[1]["series_refused"]);
        assert_eq!(
            per_side[0]["samples_refused"],
            per_side[1]["samples_refused"]
        );
        refused_samples += per_side[0]["samples_refused"].as_u64().unwrap();
    }
    assert_eq!(refused_samples as usize, SERIES - LIMIT, "{rows:?}");
    for node in ["a1", "b1"] {
        let text = client()
            .get(format!("http://{}/metrics", cluster.http(node)))
            .send()
            .unwrap()
            .text()
            .unwrap();
        let total: u64 = text
            .lines()
            .filter(|l| l.starts_with("strata_cluster_samples_refused_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(total as usize, SERIES - LIMIT, "{node}'s /metrics");
    }
}
