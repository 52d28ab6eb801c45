//! Adding and removing a storage node under load, as an operator does it: edit `cluster.toml`,
//! start the new node, `strata cluster apply` (every node restarts in turn and takes the file),
//! stop the removed node. A real 3-broker Kafka 4.1 (`scripts/kafka-cluster`), storage nodes on
//! two sides, two fronts, steady ingest of numerics and histograms with the exactly-once
//! headers (resent until acknowledged). Then a storage node's disk is wiped and it rebuilds
//! from a peer's copy. Afterwards every acknowledged sample is there once, both sides'
//! answers for every partition are identical, and the partitions that moved are held by their
//! new owners.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_common;
mod serve_common;

use cluster_common::{
    assert_every_sample_once, assert_sides_identical, Cluster, Kafka, Load, NodeSpec,
};
use serve_common::now_s;

/// Ingest rounds; each sends one Influx body (numerics) and one httptrap body (histograms).
const ROUNDS: usize = 300;
const PARTITIONS: u32 = 8;
const REPLICATION: u32 = 3;
const FRONT_STORAGE: &[&str] = &["front", "storage"];
const STORAGE: &[&str] = &["storage"];

fn spec(name: &'static str, side: &'static str, roles: &'static [&'static str]) -> NodeSpec {
    NodeSpec { name, side, roles }
}

/// `node`'s partitions as its status says: (partition, state, copied_from).
fn held(cluster: &Cluster, node: &str) -> Vec<(u64, String, Option<String>)> {
    let answer = serve_common::get_json(&format!(
        "http://{}/api/strata/v1/cluster/status",
        cluster.http(node)
    ));
    answer["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["partition"].as_u64().unwrap(),
                p["state"].as_str().unwrap().to_owned(),
                p["copied_from"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn storage_nodes_added_removed_and_rebuilt_under_load_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let kafka = Kafka::start(&tmp.path().join("kafka"), 3);
    let first = [
        spec("a1", "a", FRONT_STORAGE),
        spec("a2", "a", STORAGE),
        spec("b1", "b", FRONT_STORAGE),
        spec("b2", "b", STORAGE),
    ];
    let mut cluster = Cluster::new(tmp.path(), &kafka, PARTITIONS, REPLICATION, &first);
    let a1 = cluster.start("a1");
    let a2 = cluster.start("a2");
    let b1 = cluster.start("b1");
    let b2 = cluster.start("b2");
    let fronts = vec![cluster.http("a1"), cluster.http("b1")];
    let before = cluster::Topology::load(&cluster.topology).unwrap();

    let base_s = now_s() - 600;
    let load = Load::start(fronts.clone(), ROUNDS, 6, base_s);
    let phase = |n: usize| load.phase(n);

    // Add a3 to side a: edit the file, start it (it copies its partitions from peers), apply.
    phase(1);
    let added = [
        spec("a1", "a", FRONT_STORAGE),
        spec("a2", "a", STORAGE),
        spec("a3", "a", STORAGE),
        spec("b1", "b", FRONT_STORAGE),
        spec("b2", "b", STORAGE),
    ];
    cluster.rewrite(&kafka, PARTITIONS, REPLICATION, &added);
    let with_a3 = cluster::Topology::load(&cluster.topology).unwrap();
    let taken = with_a3.partitions_of("a3");
    assert!(!taken.is_empty(), "a3 takes no partition");
    let a3 = cluster.start("a3");
    for (p, state, from) in held(&cluster, "a3") {
        assert_eq!(state, "owned");
        assert!(
            from.is_some(),
            "a3 rebuilt partition {p} from the log, not from a peer"
        );
    }
    eprintln!("{}", cluster.apply());
    // The partitions that changed owner on side a are a3's and at most one more per node
    // (ownership caps each node at its share); the old owners handed them off.
    let side_a_owner = |t: &cluster::Topology, p: u32| t.owners(p)[0].name.clone();
    let changed: Vec<u32> = (0..PARTITIONS)
        .filter(|&p| side_a_owner(&before, p) != side_a_owner(&with_a3, p))
        .collect();
    assert!(
        changed.len() <= taken.len() + 2,
        "{changed:?} moved, a3 took {taken:?}"
    );
    for node in ["a1", "a2"] {
        for (p, state, _) in held(&cluster, node) {
            let p = p as u32;
            let lost = side_a_owner(&before, p) == node && side_a_owner(&with_a3, p) != node;
            let expected = if lost { "moved" } else { "owned" };
            assert_eq!(state, expected, "{node} partition {p}");
        }
    }

    // Remove a2: edit the file, apply, then stop it.
    phase(3);
    let removed = [
        spec("a1", "a", FRONT_STORAGE),
        spec("a3", "a", STORAGE),
        spec("b1", "b", FRONT_STORAGE),
        spec("b2", "b", STORAGE),
    ];
    cluster.rewrite(&kafka, PARTITIONS, REPLICATION, &removed);
    eprintln!("{}", cluster.apply());
    drop(a2);

    // a3 loses its disk: it rebuilds every partition from a peer's copy.
    phase(4);
    drop(a3);
    std::fs::remove_dir_all(cluster.root.join("a3")).unwrap();
    let a3 = cluster.start("a3");
    let rebuilt = held(&cluster, "a3");
    assert!(!rebuilt.is_empty());
    for (p, _, from) in &rebuilt {
        assert!(
            from.is_some(),
            "a3 replayed partition {p} instead of copying it"
        );
    }

    load.finish();
    cluster.wait_caught_up();
    for row in cluster.status() {
        eprintln!("{row}");
    }
    let start = base_s - base_s.rem_euclid(60) - 60;
    let end = base_s + ROUNDS as i64 + 120;
    let series = assert_sides_identical(&cluster.topology, start, end);
    let last = cluster::Topology::load(&cluster.topology).unwrap();
    for p in last.partitions_of("a3") {
        eprintln!("a3 holds partition {p}: {} series", series[p as usize]);
    }
    assert_eq!(series.iter().sum::<usize>(), 2 * cluster_common::STREAMS);
    assert_every_sample_once(&fronts, ROUNDS, start, end);
    drop((a1, a3, b1, b2));
}
