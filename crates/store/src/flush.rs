//! Flushing the head to blocks, and the block set readers see.
//!
//! A flush has two steps. **Freeze** (writers wait only for this): with every in-flight write
//! applied (the gate), the head is swapped for an empty one and kept, read-only, in the frozen
//! list that views read; the checkpoint is the end of the newest record it holds — every record
//! before it is in it, none after — and the cumulative-histogram state is copied as of that
//! point. **Persist** (writers run on): the frozen head is written as one block per time
//! partition it touches (all with the flush's generation), plus the cumulative state, then a new
//! manifest lists them with the new checkpoint — the commit point — and only then do the blocks
//! replace the frozen head for readers, the WAL subscriber advance and the journal purge.
//! A crash before the manifest is replaced leaves unlisted files (deleted on open) and the
//! whole frozen head still in the WAL after the old checkpoint; a crash after it leaves a WAL
//! that replays from the new checkpoint. Either way nothing is lost or counted twice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hist::convert::Cumulative;
use journal::vfs::Vfs;

use crate::block::{Block, BlockId, BlockStats, BlockWriter, SeriesData};
use crate::db::{Inner, HEAD_SUBSCRIBER};
use crate::head::{CumulativeState, Head, SeriesHead};
use crate::hist_head::MergeScratch;
use crate::manifest::{self, BlockRef, Manifest, Tombstone};
use crate::series::SeriesId;
use crate::sources::{SourceId, SourceState, Sources};
use crate::StoreError;

pub const BLOCKS_DIR: &str = "blocks";
pub const QUARANTINE_DIR: &str = "quarantine";

/// A head swapped out by a flush and not yet persisted.
pub(crate) struct Frozen {
    pub head: Head,
    pub checkpoint: u64,
    pub cumulative: Vec<(SeriesId, i64, Cumulative)>,
    /// Every sender's applied batches as of the checkpoint.
    pub sources: Vec<(SourceId, SourceState)>,
}

/// The blocks readers see, by partition start; within a partition, oldest generation first.
#[derive(Default, Clone)]
pub(crate) struct Blocks {
    pub by_partition: BTreeMap<i64, Vec<Arc<Block>>>,
    /// Quarantined blocks: reads that overlap them fail.
    pub quarantined: Vec<BlockRef>,
    pub partition_ms: i64,
    /// Rollup levels, finest first.
    pub levels: Vec<LevelBlocks>,
    pub tombstones: Vec<Tombstone>,
}

/// One rollup level's files: at most one per partition (`Block::content_generation` is the
/// newest base content it folded in).
#[derive(Default, Clone)]
pub(crate) struct LevelBlocks {
    pub period_ms: i64,
    pub partition_ms: i64,
    pub by_partition: BTreeMap<i64, Arc<Block>>,
}

impl Blocks {
    /// The newest content generation of the base blocks meeting `[start_ms, end_ms)` (0: none).
    pub fn base_content_generation(&self, start_ms: i64, end_ms: i64) -> u64 {
        if end_ms <= start_ms {
            return 0;
        }
        // Called per series and partition by reads: no allocation, no sort.
        let from = start_ms.saturating_sub(start_ms.rem_euclid(self.partition_ms));
        self.by_partition
            .range(from..end_ms)
            .flat_map(|(_, v)| v)
            .map(|b| b.content_generation)
            .max()
            .unwrap_or(0)
    }

    /// The rollup of `level` for the partition starting at `partition_start_ms`, if it holds
    /// everything the base blocks hold there and no tombstone of `series` came after it.
    pub fn fresh_rollup(
        &self,
        level: usize,
        partition_start_ms: i64,
        series: SeriesId,
    ) -> Option<&Arc<Block>> {
        let l = self.levels.get(level)?;
        let r = l.by_partition.get(&partition_start_ms)?;
        let end = partition_start_ms.saturating_add(l.partition_ms);
        if self.base_content_generation(partition_start_ms, end) > r.content_generation {
            return None;
        }
        if self
            .tombstones
            .iter()
            .any(|t| t.overlaps(series, partition_start_ms, end, r.content_generation))
        {
            return None;
        }
        Some(r)
    }

    /// The base blocks over a rollup's partition that are newer than it, if every one is a
    /// flush's own block (`id.generation == content_generation`): new data only, none of what
    /// the rollup counted — a compaction's output would hold both.
    pub fn newer_flush_blocks(&self, rollup: &Block) -> Option<Vec<&Arc<Block>>> {
        let newer: Vec<&Arc<Block>> = self
            .overlapping(rollup.id.partition_start_ms, rollup.partition_end_ms)
            .into_iter()
            .filter(|b| b.content_generation > rollup.content_generation)
            .collect();
        newer
            .iter()
            .all(|b| b.id.generation == b.content_generation)
            .then_some(newer)
    }

    /// A stale rollup of the finest level that is still exact for `series`' histograms once
    /// the base blocks newer than it are added on top, and those blocks: they are a flush's own
    /// (`newer_flush_blocks`) and no tombstone for the series is newer than the rollup. After a
    /// flush, reads of the partition still filling use this until the rollup is brought up to
    /// date.
    pub fn extendable_rollup(
        &self,
        partition_start_ms: i64,
        series: SeriesId,
    ) -> Option<(&Arc<Block>, Vec<&Arc<Block>>)> {
        let r = self.levels.first()?.by_partition.get(&partition_start_ms)?;
        let deleted = self.tombstones.iter().any(|t| {
            t.overlaps(
                series,
                partition_start_ms,
                r.partition_end_ms,
                r.content_generation,
            )
        });
        if deleted {
            return None;
        }
        Some((r, self.newer_flush_blocks(r)?))
    }

    /// The content generation of a file made from `files` over `[start_ms, end_ms)`: the
    /// newest data they reflect and the newest tombstone over the range (applied by the build).
    pub fn reflected_generation<'b>(
        &self,
        files: impl IntoIterator<Item = &'b Arc<Block>>,
        start_ms: i64,
        end_ms: i64,
    ) -> u64 {
        let tombstones = self
            .tombstones
            .iter()
            .filter(|t| t.start_ms < end_ms && start_ms < t.end_ms)
            .map(|t| t.generation);
        files
            .into_iter()
            .map(|b| b.content_generation)
            .chain(tombstones)
            .max()
            .unwrap_or(0)
    }

    /// Whether a tombstone hides `series` at `ts_ms` in a file of `content_generation`.
    pub fn hidden(&self, series: SeriesId, ts_ms: i64, content_generation: u64) -> bool {
        self.tombstones
            .iter()
            .any(|t| t.hides(series, ts_ms, content_generation))
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<Block>> {
        self.by_partition.values().flatten()
    }

    /// Blocks whose partition meets `[start_ms, end_ms)`, oldest generation first.
    pub fn overlapping(&self, start_ms: i64, end_ms: i64) -> Vec<&Arc<Block>> {
        if end_ms <= start_ms {
            return Vec::new();
        }
        let from = start_ms.saturating_sub(start_ms.rem_euclid(self.partition_ms));
        let mut out: Vec<&Arc<Block>> = self
            .by_partition
            .range(from..end_ms)
            .flat_map(|(_, v)| v)
            .collect();
        out.sort_by_key(|b| b.id.generation);
        out
    }
}

pub(crate) struct State {
    pub manifest: Manifest,
    pub blocks: Arc<Blocks>,
    /// Oldest first.
    pub frozen: Vec<Arc<Frozen>>,
}

/// What one flush wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushReport {
    pub blocks: u64,
    pub chunks: u64,
    pub samples: u64,
    pub bytes: u64,
    pub checkpoint: u64,
}

/// One block as `Store::stats` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    pub name: String,
    pub partition_start_ms: i64,
    pub partition_end_ms: i64,
    pub generation: u64,
    pub size_bytes: u64,
    pub chunks: u64,
    pub samples: u64,
    /// Chunk bytes by kind: numeric, text, histogram.
    pub chunk_bytes_by_kind: [u64; 3],
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub checkpoint: u64,
    pub blocks: Vec<BlockInfo>,
    pub quarantined: Vec<String>,
    pub head_samples: u64,
    pub head_series: u64,
    pub frozen_heads: u64,
}

pub(crate) fn block_info(b: &Block) -> BlockInfo {
    let mut by_kind = [0u64; 3];
    for e in b.entries() {
        by_kind[e.kind as usize - 1] += e.size_bytes as u64;
    }
    BlockInfo {
        name: b.id.file_name(),
        partition_start_ms: b.id.partition_start_ms,
        partition_end_ms: b.partition_end_ms,
        generation: b.id.generation,
        size_bytes: b.size_bytes,
        chunks: b.entries().len() as u64,
        samples: b.entries().iter().map(|e| e.sample_count as u64).sum(),
        chunk_bytes_by_kind: by_kind,
    }
}

/// Opens the manifest's blocks. A block that fails its checks is moved to `quarantine/` and
/// listed as quarantined in a rewritten manifest. Files in `blocks/` the manifest does not
/// list are left-overs of a flush that never committed: deleted.
pub(crate) fn open_blocks(
    vfs: &dyn Vfs,
    dir: &Path,
    mut manifest: Manifest,
) -> Result<(State, Vec<(String, String)>), StoreError> {
    let blocks_dir = dir.join(BLOCKS_DIR);
    vfs.create_dir_all(&blocks_dir).map_err(StoreError::Io)?;
    let listed: BTreeSet<String> = manifest.blocks.iter().map(|b| b.id.file_name()).collect();
    for name in vfs.list(&blocks_dir).map_err(StoreError::Io)? {
        if !listed.contains(&name) {
            vfs.remove_file(&blocks_dir.join(&name))
                .map_err(StoreError::Io)?;
        }
    }
    let mut blocks = Blocks {
        partition_ms: manifest.partition_ms,
        ..Blocks::default()
    };
    let mut quarantined = Vec::new();
    let mut kept = Vec::with_capacity(manifest.blocks.len());
    for r in std::mem::take(&mut manifest.blocks) {
        let path = blocks_dir.join(r.id.file_name());
        match open_checked(vfs, &path, &r, &manifest) {
            Ok(mut block) => {
                block.content_generation = r.content_generation;
                blocks
                    .by_partition
                    .entry(r.id.partition_start_ms)
                    .or_default()
                    .push(Arc::new(block));
                kept.push(r);
            }
            Err(why) => {
                quarantine(vfs, dir, &r.id)?;
                quarantined.push((r.id.file_name(), why));
                manifest.quarantined.push(r);
            }
        }
    }
    manifest.blocks = kept;
    for v in blocks.by_partition.values_mut() {
        v.sort_by_key(|b| b.id.generation);
    }
    if !quarantined.is_empty() {
        manifest.store(vfs, dir).map_err(StoreError::Io)?;
    }
    blocks.quarantined = manifest.quarantined.clone();
    blocks.tombstones = manifest.tombstones.clone();
    blocks.levels = crate::rollup::open_levels(vfs, dir, &mut manifest)?;
    let state = State {
        manifest,
        blocks: Arc::new(blocks),
        frozen: Vec::new(),
    };
    Ok((state, quarantined))
}

/// Opens a block and checks it is the one the manifest lists.
fn open_checked(vfs: &dyn Vfs, path: &Path, r: &BlockRef, m: &Manifest) -> Result<Block, String> {
    let block = Block::open(vfs, path).map_err(|e| format!("{e:?}"))?;
    if block.id != r.id || block.size_bytes != r.size_bytes {
        return Err("block is not the one the manifest lists (id or size)".into());
    }
    if block.base_period_ms != m.base_period_ms
        || block.partition_end_ms - block.id.partition_start_ms != m.partition_ms
    {
        return Err("block layout differs from the store's".into());
    }
    Ok(block)
}

fn quarantine(vfs: &dyn Vfs, dir: &Path, id: &BlockId) -> Result<(), StoreError> {
    let qdir = dir.join(QUARANTINE_DIR);
    vfs.create_dir_all(&qdir).map_err(StoreError::Io)?;
    let from = dir.join(BLOCKS_DIR).join(id.file_name());
    if vfs.exists(&from) {
        vfs.rename(&from, &qdir.join(id.file_name()))
            .map_err(StoreError::Io)?;
        vfs.sync_dir(&qdir).map_err(StoreError::Io)?;
    }
    Ok(())
}

/// The cumulative-histogram state and the senders' applied batches as of the checkpoint.
pub(crate) fn load_checkpoint_state(
    vfs: &dyn Vfs,
    dir: &Path,
    m: &Manifest,
) -> Result<(CumulativeState, Sources), StoreError> {
    if m.state_generation == 0 {
        return Ok((CumulativeState::default(), Sources::default()));
    }
    let state = manifest::load_state(vfs, dir, m.state_generation)?;
    Ok((
        CumulativeState::from_entries(state.cumulative),
        Sources::from_entries(state.sources),
    ))
}

impl Inner {
    pub(crate) fn flush(&self) -> Result<FlushReport, StoreError> {
        let _flushing = self.flush_lock.lock().map_err(|_| StoreError::Poisoned)?;
        self.flush_locked()
    }

    /// `flush` for callers that hold `flush_lock`.
    pub(crate) fn flush_locked(&self) -> Result<FlushReport, StoreError> {
        self.freeze()?;
        let mut report = FlushReport::default();
        loop {
            let next = {
                let state = self.state.read().map_err(|_| StoreError::Poisoned)?;
                state.frozen.first().cloned()
            };
            let Some(frozen) = next else { break };
            let one = self.persist(&frozen)?;
            report.blocks += one.blocks;
            report.chunks += one.chunks;
            report.samples += one.samples;
            report.bytes += one.bytes;
            report.checkpoint = one.checkpoint;
        }
        Ok(report)
    }

    /// Swaps the head out (see the module comment). Nothing to do for an empty head.
    fn freeze(&self) -> Result<(), StoreError> {
        let _gate = self.gate.write().map_err(|_| StoreError::Poisoned)?;
        let mut state = self.state.write().map_err(|_| StoreError::Poisoned)?;
        let mut head = self.head.write().map_err(|_| StoreError::Poisoned)?;
        if head.series.is_empty() {
            return Ok(());
        }
        let next = head.successor();
        let frozen_head = std::mem::replace(&mut *head, next);
        // No writer is between submit and apply (the gate): every record below this offset
        // is in the frozen head or an earlier block.
        let checkpoint = self.applied_end.load(Ordering::Acquire);
        let cumulative = self.cumulative.lock().map_err(|_| StoreError::Poisoned)?;
        let cumulative = cumulative
            .entries()
            .into_iter()
            .map(|(id, ts_ms, h)| (id, ts_ms, h.clone()))
            .collect();
        let sources = {
            let mut sources = self.sources.lock().map_err(|_| StoreError::Poisoned)?;
            sources.expire();
            sources.entries()
        };
        assert!(state
            .frozen
            .last()
            .is_none_or(|f| f.checkpoint <= checkpoint));
        state.frozen.push(Arc::new(Frozen {
            head: frozen_head,
            checkpoint,
            cumulative,
            sources,
        }));
        if let Ok(mut since) = self.head_since.lock() {
            *since = None;
        }
        Ok(())
    }

    /// Writes the oldest frozen head as blocks and commits it in a new manifest.
    fn persist(&self, frozen: &Arc<Frozen>) -> Result<FlushReport, StoreError> {
        let vfs = &*self.opts.vfs;
        let mut manifest = self
            .state
            .read()
            .map_err(|_| StoreError::Poisoned)?
            .manifest
            .clone();
        let generation = manifest.next_generation;
        let blocks_dir = self.dir.join(BLOCKS_DIR);
        let mut report = FlushReport {
            checkpoint: frozen.checkpoint,
            ..FlushReport::default()
        };
        let mut written = Vec::new();
        for (partition_start_ms, ids) in partitions(&frozen.head, manifest.partition_ms) {
            let id = BlockId {
                partition_start_ms,
                generation,
            };
            let stats = write_block(self, &frozen.head, id, &ids)?;
            report.blocks += 1;
            report.chunks += stats.chunks;
            report.samples += stats.samples;
            report.bytes += stats.size_bytes;
            written.push(BlockRef {
                id,
                size_bytes: stats.size_bytes,
                content_generation: generation,
            });
        }
        let state_generation = if frozen.cumulative.is_empty() && frozen.sources.is_empty() {
            0
        } else {
            let refs: Vec<(SeriesId, i64, &Cumulative)> = frozen
                .cumulative
                .iter()
                .map(|(id, ts_ms, h)| (*id, *ts_ms, h))
                .collect();
            let bytes = manifest::encode_state(&refs, &frozen.sources);
            let name = manifest::state_file_name(generation);
            manifest::write_atomic(vfs, &self.dir, &name, &bytes).map_err(StoreError::Io)?;
            generation
        };
        vfs.sync_dir(&blocks_dir).map_err(StoreError::Io)?;
        // Read back what was written before committing to it.
        let mut opened = Vec::with_capacity(written.len());
        for r in &written {
            let path = blocks_dir.join(r.id.file_name());
            let block = Block::open(vfs, &path).map_err(|error| StoreError::Block {
                block: r.id.file_name(),
                error,
            })?;
            assert_eq!(block.size_bytes, r.size_bytes);
            opened.push(Arc::new(block));
        }
        let old_state = manifest.state_generation;
        manifest.blocks.extend(written);
        manifest.checkpoint = frozen.checkpoint;
        manifest.next_generation = generation + 1;
        manifest.state_generation = state_generation;
        manifest.store(vfs, &self.dir).map_err(StoreError::Io)?;
        self.publish(manifest, opened, frozen)?;
        // Housekeeping: failures here lose nothing (the WAL is kept longer; a stale state file
        // is deleted by a later flush).
        if old_state != 0 && old_state != state_generation {
            let _ = vfs.remove_file(&self.dir.join(manifest::state_file_name(old_state)));
        }
        self.journal
            .rewind_subscriber(HEAD_SUBSCRIBER, frozen.checkpoint)?;
        self.journal.purge()?;
        Ok(report)
    }

    /// Makes committed blocks visible in place of the frozen head, in one step for readers.
    fn publish(
        &self,
        manifest: Manifest,
        opened: Vec<Arc<Block>>,
        frozen: &Arc<Frozen>,
    ) -> Result<(), StoreError> {
        let mut state = self.state.write().map_err(|_| StoreError::Poisoned)?;
        let mut blocks = Blocks::clone(&state.blocks);
        for b in opened {
            blocks
                .by_partition
                .entry(b.id.partition_start_ms)
                .or_default()
                .push(b);
        }
        state.blocks = Arc::new(blocks);
        assert!(state.frozen.first().is_some_and(|f| Arc::ptr_eq(f, frozen)));
        state.frozen.remove(0);
        state.manifest = manifest;
        Ok(())
    }

    pub(crate) fn stats(&self) -> Result<StoreStats, StoreError> {
        let state = self.state.read().map_err(|_| StoreError::Poisoned)?;
        let head = self.head.read().map_err(|_| StoreError::Poisoned)?;
        Ok(StoreStats {
            checkpoint: state.manifest.checkpoint,
            blocks: state.blocks.all().map(|b| block_info(b)).collect(),
            quarantined: state
                .manifest
                .quarantined
                .iter()
                .map(|r| r.id.file_name())
                .collect(),
            head_samples: head.samples,
            head_series: head.series.len() as u64,
            frozen_heads: state.frozen.len() as u64,
        })
    }
}

/// The partitions a head has data in, each with its series in ascending id order.
fn partitions(head: &Head, partition_ms: i64) -> BTreeMap<i64, Vec<SeriesId>> {
    let mut out: BTreeMap<i64, Vec<SeriesId>> = BTreeMap::new();
    let part = |ts: i64| ts - ts.rem_euclid(partition_ms);
    for (&id, series) in &head.series {
        // Every series' times are ascending, so its partitions come in runs: one map entry per
        // run, not a set insert per point.
        let mut add = |times: &mut dyn Iterator<Item = i64>| {
            let mut last = None;
            for p in times.map(part) {
                if last != Some(p) {
                    debug_assert!(last.is_none_or(|l| l < p), "times ascending");
                    out.entry(p).or_default().push(id);
                    last = Some(p);
                }
            }
        };
        match series {
            // A search per partition, not a step per point.
            SeriesHead::Numeric(points) => add(&mut partition_times(partition_ms, |t| {
                points.first_at_or_after(t)
            })),
            SeriesHead::Text(points) => add(&mut partition_times(partition_ms, |t| {
                points.first_at_or_after(t)
            })),
            SeriesHead::Histogram(series) => add(&mut series.starts().into_iter()),
        }
    }
    for ids in out.values_mut() {
        ids.sort_unstable();
    }
    out
}

/// The first time of each partition a series has points in, given its first point at or after
/// a time.
fn partition_times(
    partition_ms: i64,
    first_at_or_after: impl Fn(i64) -> Option<i64>,
) -> impl Iterator<Item = i64> {
    let mut next = first_at_or_after(i64::MIN);
    std::iter::from_fn(move || {
        let t = next?;
        let partition_end = (t - t.rem_euclid(partition_ms)).checked_add(partition_ms);
        next = partition_end.and_then(&first_at_or_after);
        Some(t)
    })
}

fn write_block(
    inner: &Inner,
    head: &Head,
    id: BlockId,
    ids: &[SeriesId],
) -> Result<BlockStats, StoreError> {
    let vfs = &*inner.opts.vfs;
    let end_ms = id.partition_start_ms + inner.opts.partition_ms;
    let blocks_dir = inner.dir.join(BLOCKS_DIR);
    let block_err = |error| StoreError::Block {
        block: id.file_name(),
        error,
    };
    let mut w = BlockWriter::create(vfs, &blocks_dir, id, end_ms, head.base_period_ms)
        .map_err(block_err)?;
    let mut merge_scratch = MergeScratch::default();
    for &series in ids {
        let Some(data) = head.series.get(&series) else {
            continue;
        };
        let start = id.partition_start_ms;
        let data = match data {
            SeriesHead::Numeric(points) => {
                SeriesData::Numeric(points.map_in_range(start, end_ms, |p| (p.ts_ms, p.value)))
            }
            SeriesHead::Text(points) => {
                SeriesData::Text(points.map_in_range(start, end_ms, |p| (p.ts_ms, p.value.clone())))
            }
            SeriesHead::Histogram(h) => {
                // Written from the head's coded and packed periods as they are: no histogram
                // built, and coded periods' bits copied.
                let (window, periods) = h.windowed_periods_in(start, end_ms, &mut merge_scratch);
                w.add_head_histograms(series, window, periods)
                    .map_err(block_err)?;
                continue;
            }
        };
        w.add(series, &data).map_err(block_err)?;
    }
    let (_, stats) = w.finish(vfs).map_err(block_err)?;
    Ok(stats)
}
