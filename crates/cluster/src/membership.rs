//! Partitions moving between storage nodes when the topology changes (a node added, removed,
//! or its disk lost).
//!
//! At start a node opens three kinds of partition directory: those it owns and holds (fed from
//! their recorded offset), those it owns and lacks (copied from a peer that holds them, then fed
//! from the copy's offset; from offset 0 only when no peer could give a copy), and those it holds
//! but no longer owns ("leaving": still consumed and served until the new owner of this side has
//! caught up, then "moved" and no longer consumed; the directory goes at the next start).

use std::collections::BTreeMap;
use std::path::Path;

use store::StoreOptions;

use crate::snapshot;
use crate::storage::{Holding, StorageNode};
use crate::topology::Topology;

/// The marker a moved partition's directory carries until the next start removes it.
const MOVED_FILE: &str = "moved";
/// Partition directories a data directory may hold (owned and leaving).
const DIRS_MAX: usize = crate::topology::PARTITIONS_MAX as usize;

/// A copy of a partition from a peer: the peer's name and the snapshot's bytes.
pub type PeerCopy = (String, Vec<u8>);

/// Opens `node`'s partitions under `data_dir`; `copy(p)` asks the peers for partition `p` when
/// this node owns it and lacks it.
pub fn open(
    topology: &Topology,
    node: &str,
    data_dir: &Path,
    base: &StoreOptions,
    copy: &dyn Fn(u32) -> Option<PeerCopy>,
) -> Result<StorageNode, String> {
    let owned = topology.partitions_of(node);
    let mut partitions = BTreeMap::new();
    for &p in &owned {
        let dir = data_dir.join(format!("p{p}"));
        let mut copied_from = None;
        if snapshot::is_fresh(&dir) {
            copied_from = copy_in(p, &dir, copy);
        }
        let _ = std::fs::remove_file(dir.join(MOVED_FILE));
        let partition = StorageNode::open_partition(
            p,
            &dir,
            base,
            topology.kafka.partitions,
            Holding::Owned,
            copied_from,
        )?;
        partitions.insert(p, partition);
    }
    for (p, dir) in held(data_dir)? {
        if owned.contains(&p) || p >= topology.kafka.partitions {
            continue;
        }
        if dir.join(MOVED_FILE).exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            tracing::info!(
                partition = p,
                "removed a partition that moved to another node"
            );
            continue;
        }
        let partition = StorageNode::open_partition(
            p,
            &dir,
            base,
            topology.kafka.partitions,
            Holding::Leaving,
            None,
        )?;
        partitions.insert(p, partition);
    }
    Ok(StorageNode { partitions })
}

/// Installs a peer's copy of `p` as `dir`; the peer's name, or None (replay the log from 0).
fn copy_in(p: u32, dir: &Path, copy: &dyn Fn(u32) -> Option<PeerCopy>) -> Option<String> {
    let (peer, bytes) = copy(p)?;
    // Whatever a failed start left there (an empty store, no offset) is replaced.
    let _ = std::fs::remove_dir_all(dir);
    match snapshot::install(&bytes, p, dir) {
        Ok(offset) => {
            tracing::info!(partition = p, %peer, offset, "copied the partition from a peer");
            Some(peer)
        }
        Err(e) => {
            tracing::warn!(partition = p, %peer, error = %e, "a peer's copy was refused; replaying the log");
            None
        }
    }
}

/// The partition directories (`p<N>`) under `data_dir`.
fn held(data_dir: &Path) -> Result<Vec<(u32, std::path::PathBuf)>, String> {
    let entries = match std::fs::read_dir(data_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", data_dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(p) = name.strip_prefix('p').and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if entry.path().is_dir() && out.len() < DIRS_MAX {
            out.push((p, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

impl StorageNode {
    /// Partitions this node holds but no longer owns, still consumed.
    pub fn leaving(&self) -> Vec<u32> {
        self.partitions
            .values()
            .filter(|p| p.state() == Holding::Leaving)
            .map(|p| p.id)
            .collect()
    }

    /// The new owner of leaving partition `p` caught up: stop consuming it and mark its
    /// directory for removal at the next start.
    pub fn hand_off(&self, p: u32) -> Result<(), String> {
        let Some(partition) = self.partitions.get(&p) else {
            return Err(format!("partition {p} is not held here"));
        };
        assert_eq!(partition.state(), Holding::Leaving);
        partition.set_state(Holding::Moved);
        let dir = partition.store.dir();
        std::fs::write(dir.join(MOVED_FILE), b"").map_err(|e| format!("{}: {e}", dir.display()))?;
        tracing::info!(partition = p, "handed the partition to its new owner");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::storage::apply;
    use crate::storage::tests::{count, record, TOPOLOGY};

    #[test]
    fn a_copy_from_a_peer_holds_the_same_data_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let topology = Topology::parse(TOPOLOGY).unwrap();
        let options = StoreOptions::default();
        let peer = StorageNode::open(&topology, "s", &dir.path().join("peer"), &options).unwrap();
        let p = peer.partitions[&0].clone();
        apply(&p, vec![record(0, 0), record(1, 1), record(2, 2)]).unwrap();
        let (offset, bytes) = crate::snapshot::build(&p).unwrap();
        assert_eq!(offset, 3);
        // A damaged copy is refused and leaves nothing behind.
        let mut bad = bytes.clone();
        bad[bytes.len() / 2] ^= 1;
        let target = dir.path().join("copy");
        std::fs::create_dir_all(&target).unwrap();
        let refused = crate::snapshot::install(&bad, 0, &target.join("p0")).unwrap_err();
        assert!(refused.0.contains("checksum"), "{refused}");
        assert!(!target.join("p0").exists());
        let copy = |_| Some(("peer".to_owned(), bytes.clone()));
        let node = open(&topology, "s", &target, &options, &copy).unwrap();
        let status = node.status();
        assert_eq!(status[0].next_offset, 3);
        assert_eq!(status[0].copied_from.as_deref(), Some("peer"));
        assert_eq!(count(&node), 9);
        assert_eq!(count(&peer), 9);
    }
}
