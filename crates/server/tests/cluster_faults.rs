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

use cluster_common::{assert_every_sample_once, assert_sides_identical, Cluster, Kafka, Load};
use serve_common::now_s;

/// Ingest rounds; each sends one Influx body (numerics) and one httptrap body (histograms).
const ROUNDS: usize = 320;
const PARTITIONS: u32 = 4;

#[test]
fn acknowledged_writes_survive_broker_and_storage_node_kills() {
    let tmp = tempfile::tempdir().unwrap();
    let kafka = Kafka::start(&tmp.path().join("kafka"), 3);
    let cluster = Cluster::three_nodes(tmp.path(), &kafka, PARTITIONS);
    let mut started = cluster
        .start_together(&["a1", "a2", "b1"])
        .into_iter()
        .map(Some);
    let (mut a1, mut a2, mut b1) = (
        started.next().unwrap(),
        started.next().unwrap(),
        started.next().unwrap(),
    );
    let fronts = vec![cluster.http("a1"), cluster.http("b1")];

    // Steady ingest on another thread; faults on this one as it progresses.
    let base_s = now_s() - 600;
    let load = Load::start(fronts.clone(), ROUNDS, 8, base_s);
    let phase = |n: usize| load.phase(n);
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
    load.finish();

    cluster.wait_caught_up();
    for row in cluster.status() {
        eprintln!("{row}");
    }
    let start = base_s - base_s.rem_euclid(60) - 60;
    let end = base_s + ROUNDS as i64 + 120;
    // Both sides' copies of every partition answer the same, byte for byte.
    assert_sides_identical(&cluster.topology, start, end);
    // Through a front: every stream, every acknowledged sample, nothing twice.
    assert_every_sample_once(&fronts, ROUNDS, start, end);
    drop((a1, a2, b1));
}
