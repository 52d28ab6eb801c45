//! Scale-out on Kafka: the topology file, the record a front produces for each partition a
//! request touches, and the storage node's consumer that applies a partition's records to its own
//! local store.
//!
//! A stream's partition is `crc32c(canonical key) mod partitions` ([`partition_of`]); each
//! partition is one Kafka partition and, on every storage node that owns it, one store directory
//! of its own, so a partition's records are applied in log order and the store's exactly-once
//! state (`store::Origin`) drops a record delivered twice (a producer retry, a replay after a
//! restart). Formats: `FORMAT.md`.

mod kafka;
mod membership;
mod record;
mod snapshot;
mod storage;
mod token;
mod topology;

pub use kafka::{Front, KafkaError, PartitionState};
pub use membership::{open as open_storage, PeerCopy};
pub use record::{decode, partition_of, with_origin, RecordError, Splitter, RECORD_BYTES_MAX};
pub use snapshot::{build as build_snapshot, SnapshotError, SNAPSHOT_BYTES_MAX};
pub use storage::{Holding, Partition, PartitionStatus, StorageNode};
pub use token::ReadAfter;
pub use topology::{Node, Role, Topology, TopologyError};
