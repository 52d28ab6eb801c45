//! The open block set: which immutable blocks and rollups a store is made of right now, the
//! frozen heads not yet written, and opening them (checked, damaged ones quarantined) from the
//! manifest. Below `flush`, `rollup`, `compact` and `read`, which all work on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hist::convert::Cumulative;
use journal::vfs::Vfs;

use crate::block::{Block, BlockId};
use crate::head::{CumulativeState, Head};
use crate::manifest::{self, BlockRef, Manifest, Tombstone};
use crate::series::SeriesId;
use crate::sources::{SourceId, SourceState, Sources};
use crate::StoreError;

pub const ROLLUPS_DIR: &str = "rollups";
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
    blocks.levels = open_levels(vfs, dir, &mut manifest)?;
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

pub fn level_dir(dir: &Path, period_ms: i64) -> PathBuf {
    dir.join(ROLLUPS_DIR).join(period_ms.to_string())
}

/// Opens every level's listed rollups; deletes unlisted files (left-overs of a build or a
/// replacement that did not finish). A damaged rollup is moved to `quarantine/` and dropped from
/// the manifest (its finer data, while kept, rebuilds it).
pub(crate) fn open_levels(
    vfs: &dyn Vfs,
    dir: &Path,
    manifest: &mut Manifest,
) -> Result<Vec<LevelBlocks>, StoreError> {
    let mut out = Vec::with_capacity(manifest.levels.len());
    let mut changed = false;
    for level in &mut manifest.levels {
        let ldir = level_dir(dir, level.period_ms);
        vfs.create_dir_all(&ldir).map_err(StoreError::Io)?;
        let listed: BTreeSet<String> = level.rollups.iter().map(|r| r.id.file_name()).collect();
        for name in vfs.list(&ldir).map_err(StoreError::Io)? {
            if !listed.contains(&name) {
                vfs.remove_file(&ldir.join(&name)).map_err(StoreError::Io)?;
            }
        }
        let mut blocks = LevelBlocks {
            period_ms: level.period_ms,
            partition_ms: level.partition_ms,
            by_partition: BTreeMap::new(),
        };
        let mut kept = Vec::with_capacity(level.rollups.len());
        for r in std::mem::take(&mut level.rollups) {
            let path = ldir.join(r.id.file_name());
            let ok = Block::open(vfs, &path).ok().filter(|b| {
                b.id == r.id
                    && b.size_bytes == r.size_bytes
                    && b.base_period_ms == level.period_ms
                    && b.partition_end_ms - b.id.partition_start_ms == level.partition_ms
            });
            match ok {
                Some(mut b) => {
                    b.content_generation = r.content_generation;
                    blocks
                        .by_partition
                        .insert(r.id.partition_start_ms, Arc::new(b));
                    kept.push(r);
                }
                None => {
                    let qdir = dir.join(QUARANTINE_DIR);
                    vfs.create_dir_all(&qdir).map_err(StoreError::Io)?;
                    let name = format!("rollup{}_{}", level.period_ms, r.id.file_name());
                    vfs.rename(&path, &qdir.join(name))
                        .map_err(StoreError::Io)?;
                    changed = true;
                }
            }
        }
        level.rollups = kept;
        out.push(blocks);
    }
    if changed {
        manifest.store(vfs, dir).map_err(StoreError::Io)?;
    }
    Ok(out)
}
