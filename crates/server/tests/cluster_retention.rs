//! Kafka's retention passing a storage node's checkpoint is an error, never a skip: on a real
//! 1-broker Kafka 4.1 with 1 MiB segments and 1 MiB retention, a storage node is killed, the
//! front writes past retention, and when the node starts again its partition is `failed` in
//! `strata cluster status` with nothing applied past its checkpoint. Wiping its disk then
//! rebuilds the partition from the other side's copy, and both sides answer the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_common;
mod serve_common;

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use cluster_common::{send_until_acked, Cluster, Kafka};
use serve_common::now_s;

const PROPS: &str = "log.segment.bytes=1048576\nlog.retention.bytes=1048576\n\
log.retention.check.interval.ms=1000\nlog.segment.delete.delay.ms=0";
/// Lines per request (≈ 60 bytes each): 6 MiB over the run, several segments past retention.
const LINES: usize = 2_000;
const REQUESTS: usize = 50;

#[test]
fn retention_past_a_checkpoint_fails_the_partition_and_a_peer_copy_repairs_it() {
    let tmp = tempfile::tempdir().unwrap();
    let kafka_dir = tmp.path().join("kafka");
    let kafka = Kafka::start_with_env(&kafka_dir, 1, &[("KAFKA_PROPS", PROPS)]);
    let cluster = Cluster::two_nodes(tmp.path(), &kafka, 1);
    let a1 = cluster.start("a1");
    let b1 = cluster.start("b1");
    let fronts = vec![cluster.http("a1")];
    let stall = AtomicU64::new(0);
    let base_s = now_s() - 3_600;
    let body = |i: usize| -> String {
        (0..LINES)
            .map(|j| format!("bulk,k=s{j} v={i} {}", (base_s + i as i64) * 1_000_000_000))
            .collect::<Vec<_>>()
            .join("\n")
    };
    send_until_acked(&fronts, 0, "/api/v2/write?precision=ns", &body(0), &stall);
    cluster.wait_caught_up();
    drop(b1); // kill -9: its checkpoint stays where it was

    for i in 1..REQUESTS {
        send_until_acked(
            &fronts,
            i as u64,
            "/api/v2/write?precision=ns",
            &body(i),
            &stall,
        );
    }
    // Kafka deletes the first segment (offset 0 on): what b1 needs is gone.
    let first = kafka_dir.join("node-1/data/strata-0/00000000000000000000.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    while first.exists() {
        assert!(Instant::now() < deadline, "Kafka kept {}", first.display());
        std::thread::sleep(Duration::from_millis(200));
    }

    let b1 = cluster.start("b1");
    let deadline = Instant::now() + Duration::from_secs(60);
    let row = loop {
        let rows = cluster.status();
        let row = rows.iter().find(|r| r["owner"] == "b1").unwrap().clone();
        if row["health"] == "failed" {
            break row;
        }
        assert!(Instant::now() < deadline, "b1 never failed: {rows:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("{row}");
    let error = row["error"].as_str().unwrap();
    assert!(error.contains("no longer in Kafka"), "{error}");
    let applied = row["applied"].as_i64().unwrap();
    let earliest: i64 = error
        .split("earliest ")
        .nth(1)
        .and_then(|t| t.split(')').next())
        .and_then(|t| t.parse().ok())
        .unwrap();
    assert!(
        applied < earliest,
        "b1 skipped ahead: applied {applied}, earliest {earliest}"
    );

    // Its disk wiped, b1 copies the partition from a1 and catches up.
    drop(b1);
    std::fs::remove_dir_all(cluster.root.join("b1")).unwrap();
    let b1 = cluster.start("b1");
    cluster.wait_caught_up();
    let rows = cluster.status();
    let row = rows.iter().find(|r| r["owner"] == "b1").unwrap();
    assert_eq!(row["copied_from"], "a1", "{row}");
    let start = base_s - base_s.rem_euclid(60) - 60;
    let end = base_s + REQUESTS as i64 + 120;
    let fetch = |node: &str| {
        let mut answer = serve_common::get_json(&format!(
            "http://{}/api/strata/v1/cluster/p/0/fetch?query={}&start={start}&end={end}&period=60",
            cluster.http(node),
            serve_common::urlencode("and(__name:bulk_v)")
        ));
        for series in answer["series"].as_array_mut().unwrap() {
            series.as_object_mut().unwrap().remove("activity_ms");
        }
        answer
    };
    let (a, b) = (fetch("a1"), fetch("b1"));
    assert_eq!(a["series"].as_array().unwrap().len(), LINES);
    assert_eq!(a, b, "the sides differ");
    drop((a1, b1));
}
