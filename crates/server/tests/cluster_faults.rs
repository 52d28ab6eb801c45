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
/// Enough for six faults of FAULT_ROUNDS and the rounds sent while nodes start.
const ROUNDS: usize = 640;
const FAULT_ROUNDS: usize = 25;
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
    // Each fault lasts FAULT_ROUNDS acknowledged rounds; a restarted broker is back in every
    // in-sync set before the next broker fault (with 2 of 3 required, two at once stop writes).
    let load = Load::start(fronts.clone(), ROUNDS, 1, base_s);
    load.advance(FAULT_ROUNDS);
    kafka.wait_in_sync();
    kafka.kill9(3);
    load.advance(FAULT_ROUNDS);
    drop(a2.take()); // kill -9 of a storage node
    load.advance(FAULT_ROUNDS);
    a2 = Some(cluster.start("a2"));
    kafka.restart(3);
    kafka.wait_in_sync();
    drop(b1.take()); // kill -9 of a front (and the other side's only storage node)
    load.advance(FAULT_ROUNDS);
    b1 = Some(cluster.start("b1"));
    load.advance(FAULT_ROUNDS);
    // A broker and a storage node (also a front) together.
    kafka.kill9(1);
    drop(a1.take());
    load.advance(FAULT_ROUNDS);
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
