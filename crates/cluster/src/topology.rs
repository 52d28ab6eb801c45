//! `cluster.toml`: the Kafka bootstrap servers, the topic and its partition count (fixed when the
//! cluster is created), and the processes with their side, address and roles. Which storage node
//! owns a partition is computed from the file, so every process agrees without talking.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;

/// Partitions a topology may name (each is a store directory on its owners).
pub const PARTITIONS_MAX: u32 = 1024;
/// Processes a topology may name.
pub const NODES_MAX: usize = 256;
/// Largest topology file, in bytes.
const FILE_BYTES_MAX: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Ingest endpoints (producing to Kafka) and query fan-out.
    Front,
    /// Owns partitions: consumes them into local stores and answers reads on them.
    Storage,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSection {
    /// `host:port` of one or more brokers.
    pub bootstrap: Vec<String>,
    #[serde(default = "default_topic")]
    pub topic: String,
    pub partitions: u32,
    /// Copies of each partition Kafka keeps (topic creation).
    #[serde(default = "default_replication")]
    pub replication: u16,
    /// How long a produce or fetch keeps retrying a broker before it fails, in ms.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_topic() -> String {
    "strata".to_owned()
}
fn default_replication() -> u16 {
    3
}
fn default_timeout_ms() -> u64 {
    10_000
}

/// One process of the cluster.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub name: String,
    /// The site: each partition has one owner per side.
    pub side: String,
    /// Its HTTP address, `host:port`: what it listens on and where the others reach it.
    pub http: String,
    pub roles: Vec<Role>,
}

impl Node {
    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub kafka: KafkaSection,
    #[serde(rename = "node")]
    pub nodes: Vec<Node>,
}

/// What is wrong with a topology file, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError(pub String);

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Topology {
    pub fn load(path: &Path) -> Result<Topology, TopologyError> {
        let shown = path.display();
        let len = std::fs::metadata(path)
            .map_err(|e| TopologyError(format!("{shown}: {e}")))?
            .len();
        if len > FILE_BYTES_MAX {
            return Err(TopologyError(format!(
                "{shown}: {len} bytes, at most {FILE_BYTES_MAX}"
            )));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| TopologyError(format!("{shown}: {e}")))?;
        Topology::parse(&text).map_err(|e| TopologyError(format!("{shown}: {}", e.0)))
    }

    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        let topology: Topology =
            toml::from_str(text).map_err(|e| TopologyError(e.message().to_owned()))?;
        topology.check()?;
        Ok(topology)
    }

    fn check(&self) -> Result<(), TopologyError> {
        let fail = |m: String| Err(TopologyError(m));
        if self.kafka.bootstrap.is_empty() {
            return fail("kafka.bootstrap: name at least one broker".into());
        }
        if self.kafka.partitions == 0 || self.kafka.partitions > PARTITIONS_MAX {
            return fail(format!(
                "kafka.partitions: {} is not in 1..={PARTITIONS_MAX}",
                self.kafka.partitions
            ));
        }
        if self.nodes.is_empty() || self.nodes.len() > NODES_MAX {
            return fail(format!(
                "node: 1 to {NODES_MAX} nodes, got {}",
                self.nodes.len()
            ));
        }
        let mut names = BTreeSet::new();
        for node in &self.nodes {
            if !names.insert(node.name.as_str()) {
                return fail(format!("node `{}`: named twice", node.name));
            }
            if node.roles.is_empty() {
                return fail(format!("node `{}`: roles is empty", node.name));
            }
        }
        for side in self.sides() {
            if self.storage_nodes(&side).is_empty() {
                return fail(format!("side `{side}`: no node with the storage role"));
            }
        }
        Ok(())
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Every side with a node, in name order.
    pub fn sides(&self) -> Vec<String> {
        let set: BTreeSet<&str> = self.nodes.iter().map(|n| n.side.as_str()).collect();
        set.into_iter().map(str::to_owned).collect()
    }

    /// The storage nodes of a side, in the file's order.
    pub fn storage_nodes(&self, side: &str) -> Vec<&Node> {
        self.nodes
            .iter()
            .filter(|n| n.side == side && n.has(Role::Storage))
            .collect()
    }

    /// The owner of `partition` on each side: the side's storage node with the highest
    /// rendezvous score for it, so adding a node to a side moves only the partitions that
    /// node now wins (about 1/n) and removing one moves only its own.
    pub fn owners(&self, partition: u32) -> Vec<&Node> {
        self.sides()
            .iter()
            .filter_map(|side| {
                self.storage_nodes(side)
                    .into_iter()
                    .max_by_key(|n| (rendezvous_score(&n.name, partition), n.name.as_str()))
            })
            .collect()
    }

    /// The partitions `node` owns.
    pub fn partitions_of(&self, node: &str) -> Vec<u32> {
        (0..self.kafka.partitions)
            .filter(|p| self.owners(*p).iter().any(|n| n.name == node))
            .collect()
    }
}

/// A node's score for a partition: the node name's CRC32C and the partition mixed by
/// splitmix64's finaliser (every process computes the same).
fn rendezvous_score(node: &str, partition: u32) -> u64 {
    let mut x = (u64::from(crc32c::crc32c(node.as_bytes())) << 32) | u64::from(partition);
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TEXT: &str = r#"
[kafka]
bootstrap = ["127.0.0.1:9092"]
partitions = 4

[[node]]
name = "a1"
side = "a"
http = "127.0.0.1:1"
roles = ["front", "storage"]

[[node]]
name = "a2"
side = "a"
http = "127.0.0.1:2"
roles = ["storage"]

[[node]]
name = "b1"
side = "b"
http = "127.0.0.1:3"
roles = ["storage"]
"#;

    #[test]
    fn every_partition_has_one_owner_per_side() {
        let t = Topology::parse(TEXT).unwrap();
        let mut a = t.partitions_of("a1");
        a.extend(t.partitions_of("a2"));
        a.sort();
        assert_eq!(a, vec![0, 1, 2, 3]);
        assert_eq!(t.partitions_of("b1"), vec![0, 1, 2, 3]);
        for p in 0..4 {
            let sides: Vec<&str> = t.owners(p).iter().map(|n| n.side.as_str()).collect();
            assert_eq!(sides, vec!["a", "b"]);
        }
    }

    #[test]
    fn adding_a_node_moves_only_the_partitions_it_takes() {
        let many = TEXT.replace("partitions = 4", "partitions = 64");
        let before = Topology::parse(&many).unwrap();
        let added = format!(
            "{many}\n[[node]]\nname = \"a3\"\nside = \"a\"\nhttp = \"127.0.0.1:4\"\nroles = [\"storage\"]\n"
        );
        let after = Topology::parse(&added).unwrap();
        let taken = after.partitions_of("a3");
        assert!((10..=32).contains(&taken.len()), "{taken:?}");
        for p in 0..64 {
            if !taken.contains(&p) {
                assert_eq!(before.owners(p)[0].name, after.owners(p)[0].name, "{p}");
            }
        }
        assert_eq!(before.partitions_of("b1"), after.partitions_of("b1"));
    }

    #[test]
    fn errors_name_the_field() {
        let e = Topology::parse(&TEXT.replace("partitions = 4", "partitions = 0")).unwrap_err();
        assert!(e.0.contains("kafka.partitions"), "{e}");
        let e = Topology::parse(&TEXT.replace("\"b1\"", "\"a1\"")).unwrap_err();
        assert!(e.0.contains("named twice"), "{e}");
    }
}
