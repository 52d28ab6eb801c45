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
    /// Per partition, the index in `nodes` of its owner on each side (sides in name order);
    /// computed once by `parse` (see `assign`).
    #[serde(skip)]
    owner_index: Vec<Vec<usize>>,
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
        let mut topology: Topology =
            toml::from_str(text).map_err(|e| TopologyError(e.message().to_owned()))?;
        topology.check()?;
        topology.owner_index = topology.assign();
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

    /// The owner of `partition` on each side, in side name order (see `assign`).
    pub fn owners(&self, partition: u32) -> Vec<&Node> {
        let Some(owners) = self.owner_index.get(partition as usize) else {
            debug_assert!(false, "partition {partition} of {}", self.kafka.partitions);
            return Vec::new();
        };
        owners.iter().map(|&i| &self.nodes[i]).collect()
    }

    /// Each partition's owner per side: rendezvous hashing with a cap. Every (node, partition)
    /// pair of a side has a score; taking the pairs from the highest score down, a partition
    /// goes to the node of the pair unless it already has an owner or the node holds
    /// ⌈partitions / nodes⌉. Without the cap, 6 partitions over 3 nodes fell 3 / 2 / 1 (the
    /// busiest node at 1.5× the mean); with it no node holds more than its share rounded up.
    /// Adding a node still moves mostly the partitions it takes: a few more move between the
    /// others when the smaller cap makes one give up a partition it won by score.
    fn assign(&self) -> Vec<Vec<usize>> {
        let partitions = self.kafka.partitions as usize;
        let mut owner_index = vec![Vec::new(); partitions];
        for side in self.sides() {
            let members: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].side == side && self.nodes[i].has(Role::Storage))
                .collect();
            assert!(
                !members.is_empty(),
                "check() refuses a side without storage"
            );
            let cap = partitions.div_ceil(members.len());
            let mut pairs: Vec<(u64, &str, usize, usize)> = members
                .iter()
                .enumerate()
                .flat_map(|(k, &i)| {
                    let name = self.nodes[i].name.as_str();
                    (0..partitions).map(move |p| (rendezvous_score(name, p as u32), name, k, p))
                })
                .collect();
            pairs.sort_unstable_by(|a, b| b.cmp(a));
            let mut held = vec![0usize; members.len()];
            let mut owner = vec![None; partitions];
            for (_, _, k, p) in pairs {
                if owner[p].is_none() && held[k] < cap {
                    owner[p] = Some(members[k]);
                    held[k] += 1;
                }
            }
            for (p, o) in owner.into_iter().enumerate() {
                let Some(o) = o else {
                    unreachable!("members × cap ≥ partitions: partition {p} found no room");
                };
                owner_index[p].push(o);
            }
        }
        owner_index
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
    fn adding_a_node_moves_mostly_the_partitions_it_takes() {
        let many = TEXT.replace("partitions = 4", "partitions = 64");
        let before = Topology::parse(&many).unwrap();
        let added = format!(
            "{many}\n[[node]]\nname = \"a3\"\nside = \"a\"\nhttp = \"127.0.0.1:4\"\nroles = [\"storage\"]\n"
        );
        let after = Topology::parse(&added).unwrap();
        let taken = after.partitions_of("a3");
        // Its share: 64 / 3 rounded up at most, and not far below.
        assert!((18..=22).contains(&taken.len()), "{taken:?}");
        let moved_between_others = (0..64)
            .filter(|p| !taken.contains(p))
            .filter(|&p| before.owners(p)[0].name != after.owners(p)[0].name)
            .count();
        assert!(
            moved_between_others <= taken.len() / 4,
            "{moved_between_others} moved"
        );
        assert_eq!(before.partitions_of("b1"), after.partitions_of("b1"));
    }

    #[test]
    fn no_node_holds_more_than_its_share_rounded_up() {
        for partitions in [1u32, 4, 6, 7, 64, 1024] {
            for n in 1..=7 {
                let mut text =
                    TEXT.replace("partitions = 4", &format!("partitions = {partitions}"));
                for i in 0..n {
                    text.push_str(&format!(
                        "\n[[node]]\nname = \"c{i}\"\nside = \"c\"\nhttp = \"h:{i}\"\nroles = [\"storage\"]\n"
                    ));
                }
                let t = Topology::parse(&text).unwrap();
                let cap = partitions.div_ceil(n) as usize;
                let mut held = 0;
                for i in 0..n {
                    let mine = t.partitions_of(&format!("c{i}")).len();
                    assert!(mine <= cap, "{partitions} over {n}: c{i} holds {mine}");
                    held += mine;
                }
                assert_eq!(held, partitions as usize);
                for p in 0..partitions {
                    assert_eq!(t.owners(p).len(), 3, "one owner on each of a, b, c");
                }
            }
        }
    }

    #[test]
    fn errors_name_the_field() {
        let e = Topology::parse(&TEXT.replace("partitions = 4", "partitions = 0")).unwrap_err();
        assert!(e.0.contains("kafka.partitions"), "{e}");
        let e = Topology::parse(&TEXT.replace("\"b1\"", "\"a1\"")).unwrap_err();
        assert!(e.0.contains("named twice"), "{e}");
    }
}
