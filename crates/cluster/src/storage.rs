//! A storage node: for each partition it owns, a store of its own (`<data>/p<N>`) fed from the
//! Kafka partition in log order. Kafka is the write-ahead log: the store is opened on an
//! external log (`store::WalBackend::External`), writes no WAL of its own, and each flush (the
//! store's own, sized by time as in single-node serve, and one at every stop) commits its
//! blocks, its exactly-once state and the next Kafka offset (the manifest's checkpoint) in one
//! step. A restart opens the store, which replays nothing, and fetches from
//! that checkpoint: nothing is applied twice and nothing is skipped. Applying a record reads
//! only the record (its receipt time travels in it), never the clock.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rskafka::client::partition::{OffsetAt, PartitionClient};
use store::{Store, StoreError, StoreOptions, Written};

use crate::kafka::{self, KafkaError};
use crate::topology::Topology;

/// Bytes one fetch asks a broker for at most.
const FETCH_BYTES_MAX: i32 = 16 << 20;
/// Bytes a fetch at the log's end waits for (up to `FETCH_WAIT_MS_MAX`) before the broker
/// answers: a node keeping up with its partitions otherwise wakes for every record or two,
/// and the wake-ups cost more than applying them.
const FETCH_BYTES_MIN: i32 = 256 << 10;
/// How long a fetch waits on the broker for new records, in ms.
const FETCH_WAIT_MS_MAX: i32 = 200;
/// Pause after a failed fetch or write before trying again, in ms.
const RETRY_PAUSE_MS: u64 = 200;

/// One owned partition: its store and where its consumer is.
pub struct Partition {
    pub id: u32,
    pub store: Arc<Store>,
    /// Next offset to apply (everything below it is in the store).
    next_offset: AtomicI64,
    /// The partition's end offset when last fetched (-1 before the first fetch).
    end_offset: AtomicI64,
    /// Records whose identity the store had applied before (producer retries, replays).
    duplicates: AtomicU64,
    /// Records refused for good (a stale epoch, a kind clash), the same on every replica.
    refused: AtomicU64,
    /// Samples left out because a cardinality limit refused to create their series.
    samples_refused: AtomicU64,
    /// Samples of applied records, refused ones not counted (since the node started).
    samples_applied: AtomicU64,
    /// Why the consumer stopped, when it did (retention passed the checkpoint: rebuild).
    failed: Mutex<Option<String>>,
    /// Held while records are applied or the store is checkpointed; a snapshot holds it to
    /// pause the consumer.
    paused: Mutex<()>,
    /// Owned, or leaving (no longer owned: served until the new owner caught up), or moved.
    state: AtomicU8,
    /// The node this partition was copied from when this node got it (none: from the log).
    copied_from: Mutex<Option<String>>,
}

/// What `strata cluster status` shows of one partition on one node.
#[derive(Clone, Debug)]
pub struct PartitionStatus {
    pub partition: u32,
    pub next_offset: i64,
    pub end_offset: i64,
    pub duplicates: u64,
    pub refused: u64,
    /// Samples of new series the partition's cardinality limits refused (the front had
    /// answered 2xx: the record was in Kafka).
    pub samples_refused: u64,
    /// Samples this node applied to the partition since it started.
    pub samples_applied: u64,
    /// New series those limits refused, by limit (`store::CardinalityLimit::ALL` order).
    pub series_refused: [u64; 4],
    pub failed: Option<String>,
    /// `owned`, `leaving` (still served until its new owner caught up) or `moved`.
    pub state: &'static str,
    pub copied_from: Option<String>,
}

pub struct StorageNode {
    pub partitions: BTreeMap<u32, Arc<Partition>>,
}

/// A partition's share of the configured cardinality limits: each bound divided by the
/// partition count, rounded up. Streams hash evenly over partitions, so the cluster admits about
/// what one node would (up to `partitions - 1` more series per bound); a partition that gets
/// more than its share of a burst refuses before the others do.
fn partition_limits(
    limits: store::CardinalityOptions,
    partitions: u32,
) -> store::CardinalityOptions {
    assert!(partitions > 0, "a topic has partitions");
    let share = |max: u64| {
        if max == u64::MAX {
            max
        } else {
            max.div_ceil(u64::from(partitions))
        }
    };
    store::CardinalityOptions {
        series_new_per_minute_max: share(limits.series_new_per_minute_max),
        series_active_max: share(limits.series_active_max),
        source_series_new_per_minute_max: share(limits.source_series_new_per_minute_max),
        source_series_active_max: share(limits.source_series_active_max),
        active_window_ms: limits.active_window_ms,
    }
}

/// Opens partition `p`'s store in `dir` on the Kafka partition as its log; returns it with the
/// offset its last flush recorded (where the consumer starts).
fn open_partition_store(
    p: u32,
    dir: &Path,
    base: &StoreOptions,
    partitions: u32,
) -> Result<(Store, i64), String> {
    let options = StoreOptions {
        wal: store::WalBackend::External,
        cardinality: partition_limits(base.cardinality, partitions),
        ..base.clone()
    };
    let store = Store::open(dir, options)
        .map_err(|e| format!("opening the store of partition {p}: {e}"))?;
    let next = checkpoint_of(&store).map_err(|e| format!("partition {p}: {e}"))?;
    Ok((store, next))
}

/// The Kafka offset the store's last flush recorded: every record below it is in the store.
fn checkpoint_of(store: &Store) -> Result<i64, String> {
    let checkpoint = store.stats().map_err(|e| e.to_string())?.checkpoint;
    i64::try_from(checkpoint).map_err(|_| format!("checkpoint {checkpoint} is not a Kafka offset"))
}

impl StorageNode {
    /// Opens the store of every partition `node` owns under `data_dir` (from the log only).
    pub fn open(
        topology: &Topology,
        node: &str,
        data_dir: &Path,
        base: &StoreOptions,
    ) -> Result<StorageNode, String> {
        let mut partitions = BTreeMap::new();
        for p in topology.partitions_of(node) {
            let dir = data_dir.join(format!("p{p}"));
            let partition = Self::open_partition(
                p,
                &dir,
                base,
                topology.kafka.partitions,
                Holding::Owned,
                None,
            )?;
            partitions.insert(p, partition);
        }
        Ok(StorageNode { partitions })
    }

    /// Opens partition `p`'s store in `dir`, fed from its recorded offset.
    pub(crate) fn open_partition(
        p: u32,
        dir: &Path,
        base: &StoreOptions,
        partitions: u32,
        state: Holding,
        copied_from: Option<String>,
    ) -> Result<Arc<Partition>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (store, next) = open_partition_store(p, dir, base, partitions)?;
        Ok(Arc::new(Partition {
            id: p,
            store: Arc::new(store),
            next_offset: AtomicI64::new(next),
            end_offset: AtomicI64::new(-1),
            duplicates: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            samples_refused: AtomicU64::new(0),
            samples_applied: AtomicU64::new(0),
            failed: Mutex::new(None),
            paused: Mutex::new(()),
            state: AtomicU8::new(state as u8),
            copied_from: Mutex::new(copied_from),
        }))
    }

    pub fn status(&self) -> Vec<PartitionStatus> {
        self.partitions
            .values()
            .map(|p| PartitionStatus {
                partition: p.id,
                next_offset: p.next_offset.load(Ordering::Acquire),
                end_offset: p.end_offset.load(Ordering::Acquire),
                duplicates: p.duplicates.load(Ordering::Relaxed),
                refused: p.refused.load(Ordering::Relaxed),
                samples_refused: p.samples_refused.load(Ordering::Relaxed),
                samples_applied: p.samples_applied.load(Ordering::Relaxed),
                series_refused: p
                    .store
                    .cardinality_stats()
                    .map(|s| s.refused_total)
                    .unwrap_or_default(),
                failed: p.failure(),
                state: p.state().name(),
                copied_from: p.copied_from.lock().map(|f| f.clone()).unwrap_or_default(),
            })
            .collect()
    }

    /// Connects to Kafka and runs one consumer per partition until `stop` turns true, then
    /// records every partition's checkpoint.
    pub async fn run(
        &self,
        topology: &Topology,
        client_id: &str,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), KafkaError> {
        let client = loop {
            match kafka::connect(topology, client_id).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(error = %e, "storage node: Kafka not reachable; retrying");
                    if wait_or_stop(&mut stop.clone(), RETRY_PAUSE_MS * 10).await {
                        return Ok(());
                    }
                }
            }
        };
        kafka::ensure_topic(&client, topology).await?;
        let clients = kafka::partition_clients(&client, topology).await?;
        let mut tasks = tokio::task::JoinSet::new();
        for (p, partition) in &self.partitions {
            let Some(pc) = clients.get(*p as usize).cloned() else {
                return Err(KafkaError(format!("partition {p} is not in the topic")));
            };
            tasks.spawn(consume(partition.clone(), pc, stop.clone()));
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

/// Sleeps `ms` unless stopped first; true when stopped.
async fn wait_or_stop(stop: &mut tokio::sync::watch::Receiver<bool>, ms: u64) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

fn fail(partition: &Partition, why: String) {
    tracing::error!(partition = partition.id, "{why}");
    if let Ok(mut f) = partition.failed.lock() {
        *f = Some(why);
    }
}

/// One partition's consumer: fetch from the next offset, apply in log order; checkpoint when
/// stopped. In between, the store's own flusher flushes as single-node serve's does (sized by
/// time: blocks of a partition's span), each flush recording its offset; a restart replays
/// Kafka from there, as serve replays its journal. (Flushing every 5 s made blocks of 5 s of
/// data, to be compacted again.)
async fn consume(
    partition: Arc<Partition>,
    client: Arc<PartitionClient>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if *stop.borrow() || partition.state() == Holding::Moved {
            break;
        }
        let next = partition.next_offset.load(Ordering::Acquire);
        let fetched = client
            .fetch_records(next, FETCH_BYTES_MIN..FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX)
            .await;
        let (records, end) = match fetched {
            Ok(r) => r,
            Err(e) => {
                let text = e.to_string();
                if text.contains("OffsetOutOfRange") {
                    // Kafka's retention passed the checkpoint: what is missing cannot be
                    // replayed; skipping it would lose acknowledged data without a word.
                    let earliest = client.get_offset(OffsetAt::Earliest).await.unwrap_or(-1);
                    fail(
                        &partition,
                        format!(
                            "partition {}: checkpoint offset {next} is no longer in Kafka \
                             (earliest {earliest}); this node must rebuild the partition",
                            partition.id
                        ),
                    );
                    return;
                }
                tracing::debug!(partition = partition.id, error = %text, "fetch failed");
                if wait_or_stop(&mut stop, RETRY_PAUSE_MS).await {
                    break;
                }
                continue;
            }
        };
        partition.end_offset.store(end, Ordering::Release);
        if !records.is_empty() {
            let p = partition.clone();
            let applied = tokio::task::spawn_blocking(move || {
                let _paused = p.pause();
                apply(&p, records)
            })
            .await;
            match applied {
                Ok(Ok(())) => {}
                Ok(Err(_)) if partition.failed.lock().is_ok_and(|f| f.is_some()) => return,
                Ok(Err(e)) => {
                    tracing::warn!(partition = partition.id, error = %e, "apply failed; retrying");
                    if wait_or_stop(&mut stop, RETRY_PAUSE_MS).await {
                        break;
                    }
                }
                Err(e) => {
                    fail(
                        &partition,
                        format!("partition {}: apply task: {e}", partition.id),
                    );
                    return;
                }
            }
        }
    }
    checkpoint_async(&partition).await;
}

async fn checkpoint_async(partition: &Arc<Partition>) {
    let p = partition.clone();
    match tokio::task::spawn_blocking(move || {
        let _paused = p.pause();
        checkpoint(&p)
    })
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(partition = partition.id, error = %e, "checkpoint failed"),
        Err(e) => tracing::warn!(partition = partition.id, error = %e, "checkpoint task failed"),
    }
}

impl Partition {
    /// Pauses the consumer (and checkpoints) until the guard drops.
    pub fn pause(&self) -> std::sync::MutexGuard<'_, ()> {
        self.paused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Why the consumer stopped for good, if it did.
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// Flushes, with the consumer already paused by the caller; returns the offset the flush
    /// committed in the store's manifest (where a copy of the directory resumes).
    pub(crate) fn checkpoint_paused(&self) -> Result<i64, String> {
        checkpoint(self)?;
        checkpoint_of(&self.store)
    }

    pub fn state(&self) -> Holding {
        match self.state.load(Ordering::Acquire) {
            0 => Holding::Owned,
            1 => Holding::Leaving,
            _ => Holding::Moved,
        }
    }

    pub(crate) fn set_state(&self, state: Holding) {
        self.state.store(state as u8, Ordering::Release);
    }

    /// Next offset to apply and Kafka's end offset when last fetched (-1 before).
    pub fn offsets(&self) -> (i64, i64) {
        (
            self.next_offset.load(Ordering::Acquire),
            self.end_offset.load(Ordering::Acquire),
        )
    }
}

/// Whether a node still owns a partition it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holding {
    Owned = 0,
    /// The topology gave it to another node of this side: consumed and served until that
    /// node caught up.
    Leaving = 1,
    /// Its new owner caught up: no longer consumed; the directory goes at the next start.
    Moved = 2,
}

impl Holding {
    pub fn name(self) -> &'static str {
        match self {
            Holding::Owned => "owned",
            Holding::Leaving => "leaving",
            Holding::Moved => "moved",
        }
    }
}

/// Flushes the store: its manifest then records, with the blocks, the offset below which
/// every applied record is in them.
fn checkpoint(partition: &Partition) -> Result<(), String> {
    partition.store.flush().map(drop).map_err(|e| e.to_string())
}

/// Applies fetched records in order; `next_offset` moves past each one applied (or refused
/// for good). An error leaves `next_offset` at the record that failed.
pub(crate) fn apply(
    partition: &Partition,
    records: Vec<rskafka::record::RecordAndOffset>,
) -> Result<(), String> {
    for r in records {
        let offset = r.offset;
        if offset < partition.next_offset.load(Ordering::Acquire) {
            continue;
        }
        let Some(value) = r.record.value.as_deref() else {
            partition.next_offset.store(offset + 1, Ordering::Release);
            continue;
        };
        let batch = match crate::record::decode(value) {
            Ok(batch) => batch,
            Err(e) => {
                // No front writes such a record; skipping it could drop acknowledged samples.
                let why = format!("partition {}: record at offset {offset}: {e}", partition.id);
                fail(partition, why.clone());
                return Err(why);
            }
        };
        let position = u64::try_from(offset).map_err(|_| format!("offset {offset}"))?;
        // The limits count per sender: the record's origin (the client's identity, or the
        // front's when the client sent none).
        match partition.store.write_logged(&batch, position, "") {
            Ok(w) if w.written == Written::Applied => {
                let refused: usize = w.refused.iter().map(|r| r.samples).sum();
                let left_out: usize = w.kind_rejections.iter().map(|r| r.samples).sum();
                let applied = batch.sample_count().saturating_sub(refused + left_out);
                partition
                    .samples_refused
                    .fetch_add(refused as u64, Ordering::Relaxed);
                partition
                    .samples_applied
                    .fetch_add(applied as u64, Ordering::Relaxed);
            }
            Ok(_) => {
                partition.duplicates.fetch_add(1, Ordering::Relaxed);
            }
            // Refused by the record's content alone: every replica refuses it the same way.
            Err(StoreError::StaleEpoch { .. }) | Err(StoreError::KindMismatchInBatch { .. }) => {
                partition.refused.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => return Err(format!("record at offset {offset}: {e}")),
        }
        partition.next_offset.store(offset + 1, Ordering::Release);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rskafka::record::{Record, RecordAndOffset};
    use store::{Origin, SourceId, Value};

    pub(crate) const TOPOLOGY: &str = r#"
[kafka]
bootstrap = ["127.0.0.1:9"]
partitions = 1

[[node]]
name = "s"
side = "a"
http = "127.0.0.1:1"
roles = ["storage"]
"#;

    /// Record `seq` of source `loadgen`: one histogram sample of 3.
    pub(crate) fn record(seq: u64, offset: i64) -> RecordAndOffset {
        let mut h = hist::Histogram::new();
        h.insert_n(0.5, 3);
        let mut s = crate::Splitter::new(1);
        s.add("lat|ST[k:v]", 60_000, &Value::Histogram(h)).unwrap();
        let (_, body) = s.finish().pop().unwrap();
        let origin = Origin {
            source: SourceId::new("loadgen").unwrap(),
            epoch: 1,
            seq,
            received_ms: 1_000,
        };
        RecordAndOffset {
            record: Record {
                key: None,
                value: Some(crate::with_origin(&origin, &body)),
                headers: Default::default(),
                timestamp: Default::default(),
            },
            offset,
        }
    }

    pub(crate) fn count(node: &StorageNode) -> u64 {
        let p = &node.partitions[&0];
        let id = p
            .store
            .find(&store::TagQuery::parse("and(k:v)").unwrap(), 1000)
            .unwrap()[0];
        let slicing = store::Slicing {
            start_ms: 0,
            end_ms: 120_000,
            period_ms: 60_000,
        };
        let view = p.store.view().unwrap();
        view.histograms(id, slicing)
            .unwrap()
            .iter()
            .map(|h| h.sample_count())
            .sum()
    }

    #[test]
    fn a_restart_replays_from_the_checkpoint_and_applies_each_record_once() {
        let dir = tempfile::tempdir().unwrap();
        let topology = Topology::parse(TOPOLOGY).unwrap();
        let options = StoreOptions::default();
        let node = StorageNode::open(&topology, "s", dir.path(), &options).unwrap();
        let p = node.partitions[&0].clone();
        // Offsets 0..3, offset 3 a producer retry of seq 2 in the log.
        apply(&p, vec![record(0, 0), record(1, 1)]).unwrap();
        checkpoint(&p).unwrap();
        apply(&p, vec![record(2, 2), record(2, 3)]).unwrap();
        assert_eq!(p.next_offset.load(Ordering::Acquire), 4);
        assert_eq!(p.duplicates.load(Ordering::Relaxed), 1);
        assert_eq!(count(&node), 9);
        drop((p, node));
        // Reopened: it starts at the checkpoint (2) and the store drops what it holds.
        let node = StorageNode::open(&topology, "s", dir.path(), &options).unwrap();
        let p = node.partitions[&0].clone();
        assert_eq!(p.next_offset.load(Ordering::Acquire), 2);
        apply(&p, vec![record(2, 2), record(2, 3), record(3, 4)]).unwrap();
        assert_eq!(p.next_offset.load(Ordering::Acquire), 5);
        assert_eq!(count(&node), 12);
    }

    #[test]
    fn each_partition_gets_its_share_of_a_limit_rounded_up() {
        let limits = store::CardinalityOptions {
            series_new_per_minute_max: 200_000,
            series_active_max: 10,
            ..store::CardinalityOptions::UNLIMITED
        };
        let share = partition_limits(limits, 8);
        assert_eq!(share.series_new_per_minute_max, 25_000);
        assert_eq!(share.series_active_max, 2);
        assert_eq!(share.source_series_active_max, u64::MAX);
        assert_eq!(share.active_window_ms, limits.active_window_ms);
        assert_eq!(partition_limits(limits, 1), limits);
    }

    #[test]
    fn a_damaged_record_stops_the_partition_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let topology = Topology::parse(TOPOLOGY).unwrap();
        let node = StorageNode::open(&topology, "s", dir.path(), &StoreOptions::default()).unwrap();
        let p = node.partitions[&0].clone();
        let mut bad = record(1, 1);
        if let Some(v) = bad.record.value.as_mut() {
            v[5] ^= 0xff;
        }
        let e = apply(&p, vec![record(0, 0), bad, record(2, 2)]).unwrap_err();
        assert!(e.contains("offset 1") && e.contains("checksum"), "{e}");
        assert_eq!(p.next_offset.load(Ordering::Acquire), 1);
        assert!(node.status()[0].failed.is_some());
    }
}
