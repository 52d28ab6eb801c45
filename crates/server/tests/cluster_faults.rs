//! `strata serve --cluster` on a real 3-broker Kafka 4.1 cluster (`scripts/kafka-cluster`) with
//! three storage nodes on two sides and two fronts, under steady ingest of numerics and
//! histograms sent with the exactly-once headers (a request that failed is resent as it was,
//! to either front, until acknowledged): `kill -9` of a broker, of a storage node, of a front,
//! of a broker and a storage node together, each restarted later; then a storage node's disk
//! wiped and rebuilt from Kafka. Afterwards every
//! acknowledged sample is there on both sides, histogram counts are exact (nothing counted
//! twice), and both sides' answers for every partition are byte-identical.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_common;
mod serve_common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cluster_common::{send_until_acked, Cluster, Kafka, NodeSpec};
use serde_json::Value;
use serve_common::{get_json, now_s, urlencode};

/// Ingest rounds; each sends one Influx body (numerics) and one httptrap body (histograms).
const ROUNDS: usize = 320;
/// Streams of each kind per body.
const STREAMS: usize = 8;
/// Samples in each histogram sample (two bins: 2 + 1).
const HIST_COUNT: u64 = 3;
const PARTITIONS: u32 = 4;

/// Round `i`'s two bodies: numerics at their own second, histograms at their own second.
fn bodies(i: usize, base_s: i64) -> [(String, String); 2] {
    let ts_s = base_s + i as i64;
    let lines: Vec<String> = (0..STREAMS)
        .map(|j| format!("load,k=s{j} v={i} {}", ts_s * 1_000_000_000))
        .collect();
    let hists: Vec<String> = (0..STREAMS)
        .map(|j| {
            format!(
                r#""lat|ST[k:s{j}]": {{"_type": "h", "_value": ["H[1.0e-01]=2", "H[2.0e+00]=1"], "_ts": {}}}"#,
                ts_s * 1000
            )
        })
        .collect();
    [
        ("/api/v2/write?precision=ns".to_owned(), lines.join("\n")),
        (
            "/module/httptrap/load/any".to_owned(),
            format!("{{{}}}", hists.join(",")),
        ),
    ]
}

/// One partition's answer from one node: the numeric and histogram streams. Without the
/// series' activity ranges: the store notes a histogram's activity at the sample's time when
/// written and at its base period's start when it reopens from blocks, so a replica that
/// restarted shows another range for the same data (a store gap, `crates/cluster/STATUS.md`).
fn partition_answer(http: &str, p: u32, start: i64, end: i64) -> (Value, Value) {
    let get = |query: &str| {
        let mut answer = get_json(&format!(
            "http://{http}/api/strata/v1/cluster/p/{p}/fetch?query={}&start={start}&end={end}&period=60",
            urlencode(query)
        ));
        for series in answer["series"].as_array_mut().unwrap() {
            series.as_object_mut().unwrap().remove("activity_ms");
        }
        answer
    };
    (get("and(__name:load_v)"), get("and(__name:lat)"))
}

#[test]
fn acknowledged_writes_survive_broker_and_storage_node_kills() {
    let tmp = tempfile::tempdir().unwrap();
    let kafka = Kafka::start(&tmp.path().join("kafka"), 3);
    let storage_front: &[&str] = &["front", "storage"];
    let cluster = Cluster::new(
        tmp.path(),
        &kafka,
        PARTITIONS,
        3,
        &[
            NodeSpec {
                name: "a1",
                side: "a",
                roles: storage_front,
            },
            NodeSpec {
                name: "a2",
                side: "a",
                roles: &["storage"],
            },
            NodeSpec {
                name: "b1",
                side: "b",
                roles: storage_front,
            },
        ],
    );
    let mut a1 = Some(cluster.start("a1"));
    let mut a2 = Some(cluster.start("a2"));
    let mut b1 = Some(cluster.start("b1"));
    let fronts = vec![cluster.http("a1"), cluster.http("b1")];

    // Steady ingest on another thread; faults on this one as it progresses.
    let base_s = now_s() - 600;
    let progress = Arc::new(AtomicUsize::new(0));
    let stall_ms = Arc::new(AtomicU64::new(0));
    let ingest = {
        let (progress, stall_ms, fronts) = (progress.clone(), stall_ms.clone(), fronts.clone());
        std::thread::spawn(move || {
            for i in 0..ROUNDS {
                for (k, (path, body)) in bodies(i, base_s).iter().enumerate() {
                    let seq = (2 * i + k) as u64;
                    send_until_acked(&fronts, seq, path, body, &stall_ms);
                }
                progress.store(i + 1, Ordering::Release);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let phase = |n: usize| {
        while progress.load(Ordering::Acquire) < n * ROUNDS / 8 {
            assert!(!ingest.is_finished(), "ingest stopped early");
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("phase {n}");
    };
    phase(1);
    kafka.kill9(3);
    phase(2);
    drop(a2.take()); // kill -9 of a storage node
    phase(3);
    a2 = Some(cluster.start("a2"));
    kafka.restart(3);
    phase(4);
    drop(b1.take()); // kill -9 of a front (and the other side's only storage node)
    phase(5);
    b1 = Some(cluster.start("b1"));
    phase(6);
    // A broker and a storage node (also a front) together.
    kafka.kill9(1);
    drop(a1.take());
    phase(7);
    kafka.restart(1);
    a1 = Some(cluster.start("a1"));
    // A storage node that lost its disk rebuilds its partitions from Kafka.
    drop(a2.take());
    std::fs::remove_dir_all(cluster.root.join("a2")).unwrap();
    a2 = Some(cluster.start("a2"));
    ingest.join().unwrap();
    eprintln!(
        "longest wait for an acknowledgement: {} ms",
        stall_ms.load(Ordering::Relaxed)
    );

    cluster.wait_caught_up();
    for row in cluster.status() {
        eprintln!("{row}");
    }
    let start = base_s - base_s.rem_euclid(60) - 60;
    let end = base_s + ROUNDS as i64 + 120;
    // Both sides' copies of every partition answer the same, byte for byte.
    let topology = cluster::Topology::load(&cluster.topology).unwrap();
    for p in 0..PARTITIONS {
        let owners = topology.owners(p);
        assert_eq!(owners.len(), 2);
        let a = partition_answer(&owners[0].http, p, start, end);
        let b = partition_answer(&owners[1].http, p, start, end);
        assert_eq!(a, b, "partition {p}: sides differ");
    }
    // Through a front: every stream, every acknowledged sample, nothing twice.
    for front in &fronts {
        let fetch = |query: &str| {
            get_json(&format!(
                "http://{front}/api/strata/v1/fetch?query={}&start={start}&end={end}&period=60",
                urlencode(query)
            ))
        };
        let numerics = fetch("and(__name:load_v)");
        let series = numerics["series"].as_array().unwrap();
        assert_eq!(series.len(), STREAMS, "{numerics}");
        for s in series {
            let count: u64 = s["data"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|d| d["count"].as_u64())
                .sum();
            assert_eq!(count, ROUNDS as u64, "{}", s["key"]);
        }
        let hists = fetch("and(__name:lat)");
        let series = hists["series"].as_array().unwrap();
        assert_eq!(series.len(), STREAMS, "{hists}");
        for s in series {
            let count: u64 = s["data"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|d| d["value"]["bins"].as_array())
                .flatten()
                .filter_map(|bin| bin[2].as_u64())
                .sum();
            assert_eq!(count, ROUNDS as u64 * HIST_COUNT, "{}", s["key"]);
        }
    }
    drop((a1, a2, b1));
}
