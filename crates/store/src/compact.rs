//! Compaction and deletion.
//!
//! **Deletion** adds tombstones (series, time range, generation) to the manifest: every read
//! hides what they cover in files older than them at once, and rollups older than them stop
//! being used for those series. **Compaction** rewrites a base partition's blocks as one block
//! without the deleted data (and, past the raw numeric retention, without numeric chunks),
//! taking the next generation: it includes every block of the partition, so the duplicate rule
//! (a later generation wins a millisecond) still holds. A tombstone is dropped once no base block
//! or rollup older than it holds data of its series in its range.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hist::Histogram;

use crate::block::{Block, BlockId, BlockWriter, ChunkData, SeriesData};
use crate::blockset::{Blocks, BLOCKS_DIR};
use crate::engine::Inner;
use crate::manifest::{BlockRef, Tombstone};
use crate::read::merge_runs;
use crate::rollup::{failpoint, read_chunk};
use crate::series::{Kind, SeriesId};
use crate::StoreError;

/// What one `compact` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// Base partitions rewritten.
    pub partitions: u64,
    /// Input blocks replaced.
    pub blocks_in: u64,
    pub bytes_freed: u64,
    /// Tombstones no longer needed (removed from the manifest).
    pub tombstones_removed: u64,
}

/// One series' data in a partition, read from every block (oldest generation first) without
/// what tombstones hide: numeric and text by the duplicate rule, histograms merged per period.
fn series_data(
    blocks: &Blocks,
    files: &[Arc<Block>],
    id: SeriesId,
    kind: Kind,
) -> Result<Option<SeriesData>, StoreError> {
    let mut numeric: Vec<Vec<(i64, f64)>> = Vec::new();
    let mut text: Vec<Vec<(i64, String)>> = Vec::new();
    let mut hists: BTreeMap<i64, Histogram> = BTreeMap::new();
    for b in files {
        let keep = |t: &i64| !blocks.hidden(id, *t, b.content_generation);
        for e in b.entries_of(id) {
            match read_chunk(b, e)? {
                ChunkData::Numeric(v) => {
                    numeric.push(v.into_iter().filter(|p| keep(&p.0)).collect())
                }
                ChunkData::Text(v) => text.push(v.into_iter().filter(|p| keep(&p.0)).collect()),
                ChunkData::Histogram(v) => {
                    for (t, h) in v.into_iter().filter(|p| keep(&p.0)) {
                        hists.entry(t).or_default().merge(&h);
                    }
                }
                ChunkData::Aggregates(_) => {}
            }
        }
    }
    let data = match kind {
        Kind::Numeric => SeriesData::Numeric(merge_runs(numeric)),
        Kind::Text => SeriesData::Text(merge_runs(text)),
        Kind::Histogram => {
            SeriesData::Histogram(hists.into_iter().filter(|(_, h)| !h.is_empty()).collect())
        }
    };
    let empty = match &data {
        SeriesData::Numeric(v) => v.is_empty(),
        SeriesData::Text(v) => v.is_empty(),
        SeriesData::Histogram(v) => v.is_empty(),
        SeriesData::Aggregates(v) => v.is_empty(),
    };
    Ok((!empty).then_some(data))
}

impl Inner {
    /// Rewrites the base partition at `start_ms` as one block without deleted data (and without
    /// numeric chunks when `drop_numeric`). Callers hold `flush_lock`. Returns the bytes freed.
    pub(crate) fn compact_partition(
        &self,
        start_ms: i64,
        drop_numeric: bool,
    ) -> Result<u64, StoreError> {
        let vfs = &*self.opts.vfs;
        let (blocks, generation) = {
            let state = self.state.read().map_err(|_| StoreError::Poisoned)?;
            (state.blocks.clone(), state.manifest.next_generation)
        };
        let Some(files) = blocks.by_partition.get(&start_ms).cloned() else {
            return Ok(0);
        };
        let end_ms = start_ms.saturating_add(blocks.partition_ms);
        // The rewrite applies every tombstone over the partition: none of them hides anything
        // in it any more, so it reflects their generations too (and rollups of the range, which
        // still hold the deleted data, become stale and are rebuilt).
        let content_generation = blocks.reflected_generation(&files, start_ms, end_ms);
        let mut kinds: BTreeMap<SeriesId, Kind> = BTreeMap::new();
        for b in &files {
            for e in b.entries() {
                kinds.entry(e.series).or_insert(e.kind);
            }
        }
        let id = BlockId {
            partition_start_ms: start_ms,
            generation,
        };
        let dir = self.dir.join(BLOCKS_DIR);
        let block_err = |error| StoreError::Block {
            block: id.file_name(),
            error,
        };
        let mut w = BlockWriter::create(vfs, &dir, id, end_ms, self.opts.base_period_ms)
            .map_err(block_err)?;
        for (&series, &kind) in &kinds {
            if drop_numeric && kind == Kind::Numeric {
                continue;
            }
            if let Some(data) = series_data(&blocks, &files, series, kind)? {
                w.add(series, &data).map_err(block_err)?;
            }
        }
        let (path, stats) = w.finish(vfs).map_err(block_err)?;
        failpoint("compact-written");
        vfs.sync_dir(&dir).map_err(StoreError::Io)?;
        let mut block = Block::open(vfs, &path).map_err(block_err)?;
        block.content_generation = content_generation;
        let block = Arc::new(block);
        let new_ref = BlockRef {
            id,
            size_bytes: stats.size_bytes,
            content_generation,
        };
        let gone: BTreeSet<BlockId> = files.iter().map(|b| b.id).collect();
        self.commit(|m, b| {
            m.blocks.retain(|r| !gone.contains(&r.id));
            m.blocks.push(new_ref);
            m.next_generation = generation + 1;
            b.by_partition.insert(start_ms, vec![block]);
        })?;
        failpoint("compact-committed");
        let mut freed = 0u64;
        for f in &files {
            freed += f.size_bytes;
            let _ = vfs.remove_file(&dir.join(f.id.file_name()));
        }
        Ok(freed.saturating_sub(stats.size_bytes))
    }

    /// Adds tombstones for `ids` over `[start_ms, end_ms)`: flushes first, so everything
    /// acknowledged before the call is in blocks older than them.
    pub(crate) fn delete(
        &self,
        ids: &[SeriesId],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<u64, StoreError> {
        if start_ms >= end_ms || ids.is_empty() {
            return Ok(0);
        }
        let _serial = self.flush_lock.lock().map_err(|_| StoreError::Poisoned)?;
        self.flush_locked()?;
        let count = self
            .state
            .read()
            .map_err(|_| StoreError::Poisoned)?
            .manifest
            .tombstones
            .len();
        if count + ids.len() > crate::manifest::TOMBSTONES_MAX as usize {
            return Err(StoreError::BadRange(
                "more tombstones than TOMBSTONES_MAX: compact first",
            ));
        }
        self.commit(|m, _| {
            let generation = m.next_generation;
            m.tombstones.extend(ids.iter().map(|&series| Tombstone {
                series,
                start_ms,
                end_ms,
                generation,
            }));
            m.next_generation = generation + 1;
        })?;
        self.past.changed_everywhere();
        Ok(ids.len() as u64)
    }

    /// See `Store::compact_completed`. Rollups stay fresh: a rewrite without tombstones
    /// reflects the generations its inputs did.
    pub(crate) fn compact_completed(
        &self,
        now_ms: i64,
        partitions_max: usize,
    ) -> Result<u64, StoreError> {
        let _serial = self.flush_lock.lock().map_err(|_| StoreError::Poisoned)?;
        let blocks = self.blocks_now()?;
        let mut failed = self
            .compact_failed
            .lock()
            .map_err(|_| StoreError::Poisoned)?;
        let completed: Vec<i64> = blocks
            .by_partition
            .iter()
            .filter(|(&start, files)| {
                let end = start.saturating_add(blocks.partition_ms);
                files.len() > 1
                    && end.saturating_add(self.opts.rollup_grace_ms) <= now_ms
                    && !failed.contains(&start)
            })
            .map(|(&start, _)| start)
            .take(partitions_max)
            .collect();
        let mut rewritten = 0;
        // Bounded: at most `partitions_max` partitions.
        for start in completed {
            match self.compact_partition(start, false) {
                Ok(_) => rewritten += 1,
                // A damaged chunk: reads report it; rewriting the partition again and again
                // would only decode it again each pass.
                Err(StoreError::BlockDamaged { .. }) => {
                    failed.insert(start);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(rewritten)
    }

    /// The blocks as of now (shared, not copied).
    fn blocks_now(&self) -> Result<Arc<Blocks>, StoreError> {
        Ok(self
            .state
            .read()
            .map_err(|_| StoreError::Poisoned)?
            .blocks
            .clone())
    }

    /// Rewrites every base partition that holds deleted data, rebuilds the rollups that
    /// still reflect it, and drops the tombstones nothing needs any more.
    pub(crate) fn compact(&self, now_ms: i64) -> Result<CompactReport, StoreError> {
        let mut report = CompactReport::default();
        {
            let _serial = self.flush_lock.lock().map_err(|_| StoreError::Poisoned)?;
            let blocks = self.blocks_now()?;
            for (&start, files) in &blocks.by_partition {
                let end = start.saturating_add(blocks.partition_ms);
                let deleted = files.iter().any(|b| {
                    blocks.tombstones.iter().any(|t| {
                        t.overlaps(t.series, start, end, b.content_generation)
                            && !b.entries_of(t.series).is_empty()
                    })
                });
                if files.len() > 1 || deleted {
                    report.blocks_in += files.len() as u64;
                    report.bytes_freed += self.compact_partition(start, false)?;
                    report.partitions += 1;
                }
            }
        }
        // Rollups of ranges still within their grace are not rebuilt: tombstones over them stay.
        self.build_rollups(now_ms, usize::MAX)?;
        let _serial = self.flush_lock.lock().map_err(|_| StoreError::Poisoned)?;
        let blocks = self.blocks_now()?;
        let needed = |t: &Tombstone| {
            let base = blocks
                .overlapping(t.start_ms, t.end_ms)
                .into_iter()
                .any(|b| {
                    b.content_generation < t.generation
                        && b.entries_of(t.series)
                            .iter()
                            .any(|e| e.first_ts_ms < t.end_ms && t.start_ms <= e.last_ts_ms)
                });
            let rollups = blocks.levels.iter().any(|l| {
                l.by_partition.values().any(|b| {
                    let (s, e) = (b.id.partition_start_ms, b.partition_end_ms);
                    s < t.end_ms
                        && t.start_ms < e
                        && b.content_generation < t.generation
                        && !b.entries_of(t.series).is_empty()
                })
            });
            base || rollups
        };
        let obsolete = blocks.tombstones.iter().filter(|t| !needed(t)).count();
        if obsolete > 0 {
            self.commit(|m, _| m.tombstones.retain(|t| needed(t)))?;
            report.tombstones_removed = obsolete as u64;
        }
        Ok(report)
    }
}
