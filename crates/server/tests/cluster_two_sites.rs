//! The two-site setting on a real 5-broker Kafka 4.1 (`scripts/kafka-cluster`): brokers labelled
//! with their site (`broker.rack`: two on site a, two on site b, a tie-breaker on site c),
//! every partition on all five with `min.insync.replicas=4`, so an acknowledged write is on at
//! least one broker of each site (`docs/cluster.md`), and a site's loss leaves the KRaft
//! controllers a majority. Four storage nodes on two sides, two fronts, steady ingest of
//! numerics and histograms with the exactly-once headers (resent until acknowledged): `kill -9`
//! of a broker of each site, of a storage node, and of one side's storage nodes together (one is
//! a front), each restarted; a broker is killed only when every partition's in-sync set is
//! full again (one fault at a time: with four of five replicas required in sync, a second
//! broker lost before the first rejoined stops writes by design). Afterwards every
//! acknowledged sample is there once through both fronts and both sides' answers for every
//! partition are identical.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_common;
mod serve_common;

use cluster_common::{
    assert_every_sample_once, assert_sides_identical, Cluster, Kafka, Load, NodeSpec,
};
use serve_common::now_s;

/// Ingest rounds; each sends one Influx body (numerics) and one httptrap body (histograms).
/// Enough for seven faults of FAULT_ROUNDS and the rounds sent while nodes start.
const ROUNDS: usize = 800;
const FAULT_ROUNDS: usize = 25;
const PARTITIONS: u32 = 4;
/// Every partition on every broker; with `min.insync.replicas=4` any acknowledged set of four
/// holds both sites.
const REPLICATION: u32 = 5;
const RACKS: &str = "a,a,b,b,c";
const MIN_ISR: &str = "4";

#[test]
fn two_sites_lose_nothing_acknowledged_through_broker_and_storage_kills() {
    let tmp = tempfile::tempdir().unwrap();
    let kafka = Kafka::start_with_env(
        &tmp.path().join("kafka"),
        5,
        &[
            ("KAFKA_RACKS", RACKS),
            ("KAFKA_MIN_ISR", MIN_ISR),
            ("KAFKA_HEAP", "256m"),
        ],
    );
    let front_storage: &[&str] = &["front", "storage"];
    let storage: &[&str] = &["storage"];
    let nodes = [
        NodeSpec {
            name: "a1",
            side: "a",
            roles: front_storage,
        },
        NodeSpec {
            name: "a2",
            side: "a",
            roles: storage,
        },
        NodeSpec {
            name: "b1",
            side: "b",
            roles: front_storage,
        },
        NodeSpec {
            name: "b2",
            side: "b",
            roles: storage,
        },
    ];
    let cluster = Cluster::new(tmp.path(), &kafka, PARTITIONS, REPLICATION, &nodes);
    let a1 = cluster.start("a1");
    let mut a2 = Some(cluster.start("a2"));
    let mut b1 = Some(cluster.start("b1"));
    let mut b2 = Some(cluster.start("b2"));
    let fronts = vec![cluster.http("a1"), cluster.http("b1")];

    let base_s = now_s() - 600;
    let load = Load::start(fronts.clone(), ROUNDS, 1, base_s);
    // Each fault lasts FAULT_ROUNDS acknowledged rounds; a restarted broker is back in every
    // in-sync set before the next fault, so each is a single fault.
    load.advance(FAULT_ROUNDS);
    kafka.wait_in_sync();
    kafka.kill9(2); // a broker of site a
    load.advance(FAULT_ROUNDS);
    kafka.restart(2);
    kafka.wait_in_sync();
    drop(a2.take()); // a storage node
    load.advance(FAULT_ROUNDS);
    a2 = Some(cluster.start("a2"));
    kafka.kill9(3); // a broker of site b
    load.advance(FAULT_ROUNDS);
    kafka.restart(3);
    kafka.wait_in_sync();
    // One side's storage nodes together (b1 is also a front): side a serves and takes writes.
    drop(b1.take());
    drop(b2.take());
    load.advance(FAULT_ROUNDS);
    b1 = Some(cluster.start("b1"));
    b2 = Some(cluster.start("b2"));
    load.advance(FAULT_ROUNDS);
    kafka.kill9(5); // the tie-breaker
    load.advance(FAULT_ROUNDS);
    kafka.restart(5);
    load.finish();

    cluster.wait_caught_up();
    let start = base_s - base_s.rem_euclid(60) - 60;
    let end = base_s + ROUNDS as i64 + 120;
    let series = assert_sides_identical(&cluster.topology, start, end);
    assert_eq!(series.iter().sum::<usize>(), 2 * cluster_common::STREAMS);
    assert_every_sample_once(&fronts, ROUNDS, start, end);
    drop((a1, a2, b1, b2));
}
