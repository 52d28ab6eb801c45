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

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hist::convert::Cumulative;

use crate::block::{Block, BlockId, BlockStats, BlockWriter, SeriesData};
use crate::blockset::{Blocks, Frozen, BLOCKS_DIR};
use crate::engine::Inner;
use crate::head::{Head, SeriesHead};
use crate::hist_head::MergeScratch;
use crate::manifest::{self, BlockRef, Manifest};
use crate::series::SeriesId;
use crate::StoreError;

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
    /// Bytes the head's numeric and text series take (`Head::points_size_bytes`).
    pub head_points_bytes: u64,
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
        self.log.flushed(frozen.checkpoint)?;
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
            head_points_bytes: head.points_size_bytes() as u64,
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
            SeriesHead::Numeric(series) => add(&mut partition_times(partition_ms, |t| {
                series.first_at_or_after(t)
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
            SeriesHead::Numeric(series) => SeriesData::Numeric(series.in_range(start, end_ms)),
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
