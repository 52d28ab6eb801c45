//! Rollups, retention and compaction.
//!
//! **Levels.** Each level keeps, per series, one slice per `period_ms`: numeric series as
//! aggregate columns (`SliceAggregate`: count, sum, Σ value², min, max, first, last with their
//! times, counter increase), histogram series as the exact merge of the slice's base periods.
//! Level `i` is built from level `i − 1` (level 0 from the base blocks), one partition at a
//! time; a level's partition is `period × 288` rounded up to a multiple of the finer level's
//! partition, so every finer partition falls in exactly one coarser one. A rollup is one block
//! file (`rollups/<period_ms>/p<start>_g<generation>.blk`, the block format with aggregate
//! chunks for numeric series) listed in the manifest with its **content generation**: the newest
//! base content (flush generation) and tombstone it reflects.
//!
//! **Freshness.** A base block whose content generation is above a rollup's, in its range, is
//! data the rollup lacks (late data): the rollup is stale, reads fall back to finer data for that
//! partition and the next build rebuilds it. A tombstone newer than the rollup does the same for
//! its series. Rebuilds replace the whole partition's file, so nothing is counted twice; where
//! the finer data has already expired (retention), the rebuild starts from the old rollup and
//! folds in only the source files newer than it (incremental).
//!
//! **Crash safety.** Files are written under new names, synced, the directory synced, and only
//! then does one manifest replacement (the commit point) swap them in; replaced files are
//! deleted after it. A crash at any step leaves either the old manifest (the new files are
//! unlisted and deleted on open) or the new one (the old files are unlisted and deleted on open).
//! `STRATA_STORE_FAILPOINT=<name>` makes the process exit at that step (crash tests).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hist::Histogram;

use crate::aggregate::SliceAggregate;
use crate::block::{Block, BlockError, BlockId, BlockWriter, ChunkData, Entry, SeriesData};
use crate::blockset::{level_dir, Blocks, LevelBlocks, BLOCKS_DIR};
use crate::engine::{Inner, StoreOptions};
use crate::manifest::{BlockRef, LevelManifest, Manifest};
use crate::read::merge_runs;
use crate::series::{Kind, SeriesId};
use crate::StoreError;

/// A level's partition holds this many of its slices (rounded up to the finer partition).
pub const LEVEL_PARTITION_SLICES: i64 = 288;
/// A rollup chunk holds at most this many slices, aligned in time: a short read (4 h at a 1 h
/// step) decodes a few slices per series, not the partition's 288. Smaller chunks code
/// histograms less well (each chunk starts its model afresh).
pub const ROLLUP_CHUNK_SLICES: i64 = 4;
/// The same for numeric series, whose aggregate chunks cost a few bytes per slice: a chunk's
/// fixed cost (frame, timestamps, Rice parameters, ≈ 30 B, and its 40 B directory entry) is then
/// amortised over 144 slices — 12 h at 5 m (≈ 140 B per stream-day of the 5 m level's bytes on
/// disk against ≈ 1,800 B of slices) — while a short read still decodes one or two chunks.
pub const ROLLUP_NUMERIC_CHUNK_SLICES: i64 = 144;
/// The environment variable naming a failpoint: the process exits there (crash tests only;
/// debug builds only).
pub const FAILPOINT_ENV: &str = "STRATA_STORE_FAILPOINT";
/// The exit status of a process stopped at a failpoint.
pub const FAILPOINT_EXIT_CODE: i32 = 97;

/// What one `build_rollups` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RollupReport {
    /// Rollup partitions written (new or rebuilt), over all levels.
    pub partitions: u64,
    /// Of those, rebuilt because they were stale.
    pub rebuilt: u64,
    /// Of those, brought up to date from the old rollup and only the files newer than it.
    pub extended: u64,
    pub series: u64,
    pub bytes: u64,
}

/// What one `apply_retention` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Base blocks dropped whole.
    pub base_blocks_dropped: u64,
    /// Base partitions rewritten without their raw numeric data.
    pub numeric_partitions_dropped: u64,
    /// Rollup files dropped, over all levels.
    pub rollups_dropped: u64,
    pub bytes_freed: u64,
}

/// Exits the process when `FAILPOINT_ENV` names this step. Compiled into debug builds only (the
/// test suite's): a release binary has no way to be stopped half-way by its environment.
#[cfg(debug_assertions)]
pub(crate) fn failpoint(name: &str) {
    if std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == name) {
        std::process::exit(FAILPOINT_EXIT_CODE);
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn failpoint(_name: &str) {}

pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `(period_ms, partition_ms)` of each configured level, finest first.
pub fn level_layout(opts: &StoreOptions) -> Vec<(i64, i64)> {
    let mut finer_partition = opts.partition_ms;
    let mut out = Vec::with_capacity(opts.levels.len());
    for l in &opts.levels {
        let want = l.period_ms.saturating_mul(LEVEL_PARTITION_SLICES);
        let slices = (want + finer_partition - 1) / finer_partition;
        let partition = slices.saturating_mul(finer_partition);
        // Also a multiple of the period (the finer partition may not be).
        let partition = lcm(partition, l.period_ms);
        out.push((l.period_ms, partition));
        finer_partition = partition;
    }
    out
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: i64, b: i64) -> i64 {
    (a / gcd(a, b)).saturating_mul(b)
}

pub(crate) fn empty_levels(layout: &[(i64, i64)]) -> Vec<LevelManifest> {
    layout
        .iter()
        .map(|&(period_ms, partition_ms)| LevelManifest {
            period_ms,
            partition_ms,
            rollups: Vec::new(),
        })
        .collect()
}

fn part_start(ts_ms: i64, partition_ms: i64) -> i64 {
    ts_ms - ts_ms.rem_euclid(partition_ms)
}

/// Reads one chunk of a block the store lists, naming it on damage.
pub(crate) fn read_chunk(block: &Block, entry: &Entry) -> Result<ChunkData, StoreError> {
    block.read_chunk(entry).map_err(|e| match e {
        BlockError::Io(e) => StoreError::Io(e),
        e => StoreError::BlockDamaged {
            block: block.path.display().to_string(),
            series: entry.series.0,
            start_ms: entry.first_ts_ms,
            end_ms: entry.last_ts_ms.saturating_add(1),
            what: format!("{e}"),
        },
    })
}

/// Where a level's partition gets its data.
struct Sources<'a> {
    /// Base blocks (oldest generation first) or finer rollups (ascending time).
    files: Vec<&'a Arc<Block>>,
    from_base: bool,
    /// Newest content generation among them and the tombstones in range.
    content_generation: u64,
}

fn sources<'a>(blocks: &'a Blocks, level: usize, start_ms: i64, end_ms: i64) -> Sources<'a> {
    let files: Vec<&Arc<Block>> = if level == 0 {
        blocks.overlapping(start_ms, end_ms)
    } else {
        blocks.levels[level - 1]
            .by_partition
            .range(start_ms..end_ms)
            .map(|(_, b)| b)
            .collect()
    };
    let content_generation = blocks.reflected_generation(files.iter().copied(), start_ms, end_ms);
    Sources {
        files,
        from_base: level == 0,
        content_generation,
    }
}

/// One series' slices being built.
enum Acc {
    Numeric(BTreeMap<i64, SliceAggregate>),
    Histogram(BTreeMap<i64, Histogram>),
}

impl Acc {
    fn new(kind: Kind) -> Option<Acc> {
        match kind {
            Kind::Numeric => Some(Acc::Numeric(BTreeMap::new())),
            Kind::Histogram => Some(Acc::Histogram(BTreeMap::new())),
            Kind::Text => None,
        }
    }

    /// Adds a stretch that lies after everything added so far for each slice it touches
    /// (`then`), or overlaps it (`combine`: increases add, no step between them).
    fn add_numeric(&mut self, slice_ms: i64, s: &SliceAggregate, in_order: bool) {
        if let Acc::Numeric(m) = self {
            m.entry(slice_ms)
                .and_modify(|acc| {
                    *acc = if in_order && acc.agg.last_ts_ms < s.agg.first_ts_ms {
                        acc.then(s)
                    } else {
                        SliceAggregate {
                            agg: acc.agg.combine(&s.agg),
                            increase: acc.increase + s.increase,
                        }
                    }
                })
                .or_insert(*s);
        }
    }

    fn add_histogram(&mut self, slice_ms: i64, h: &Histogram) {
        if let Acc::Histogram(m) = self {
            m.entry(slice_ms).or_default().merge(h);
        }
    }

    fn into_data(self) -> Option<SeriesData> {
        match self {
            Acc::Numeric(m) if !m.is_empty() => {
                Some(SeriesData::Aggregates(m.into_iter().collect()))
            }
            Acc::Histogram(m) => {
                let v: Vec<(i64, Histogram)> =
                    m.into_iter().filter(|(_, h)| !h.is_empty()).collect();
                (!v.is_empty()).then_some(SeriesData::Histogram(v))
            }
            Acc::Numeric(_) => None,
        }
    }
}

/// Builds one series' slices for a level partition from `files` (and `seed`, the old rollup,
/// in an incremental rebuild).
/// The old rollup a build starts from, if any, and how the new data lies against it.
#[derive(Clone, Copy)]
enum Seeded<'a> {
    No,
    /// New numeric samples come after every sample it counted (`extends_exactly`): a slice
    /// they share is its part followed by theirs, with the step between them.
    Before(&'a Arc<Block>),
    /// New data may interleave with its slices: no step between them.
    Interleaved(&'a Arc<Block>),
}

/// Whether level 0's rollup `old` of its partition is brought up to date exactly by folding in
/// only the base files newer than it (the partition still filling, after a flush): every newer
/// file is a flush's own block (`id.generation == content_generation`; a compaction's output
/// holds data the rollup already counted), no tombstone over the partition is newer than the
/// rollup (a rebuild must leave deleted data out), and every numeric series' new samples come
/// after everything the older files hold for it (the duplicate rule has nothing to decide
/// between old and new, and a counter's step from old to new is known).
fn extends_exactly(blocks: &Blocks, old: &Block) -> bool {
    let generation = old.content_generation;
    let (start_ms, end_ms) = (old.id.partition_start_ms, old.partition_end_ms);
    let Some(newer) = blocks.newer_flush_blocks(old) else {
        return false;
    };
    let newer_tombstone = blocks
        .tombstones
        .iter()
        .any(|t| t.start_ms < end_ms && start_ms < t.end_ms && t.generation > generation);
    if newer.is_empty() || newer_tombstone {
        return false;
    }
    let older: Vec<&Arc<Block>> = blocks
        .overlapping(start_ms, end_ms)
        .into_iter()
        .filter(|b| b.content_generation <= generation)
        .collect();
    let mut first_new: BTreeMap<SeriesId, i64> = BTreeMap::new();
    for e in newer.iter().flat_map(|b| b.entries()) {
        if e.kind == Kind::Numeric {
            let first = first_new.entry(e.series).or_insert(e.first_ts_ms);
            *first = (*first).min(e.first_ts_ms);
        }
    }
    first_new.iter().all(|(&series, &first)| {
        older
            .iter()
            .flat_map(|b| b.entries_of(series))
            .all(|e| e.last_ts_ms < first)
    })
}

fn build_series(
    blocks: &Blocks,
    period_ms: i64,
    id: SeriesId,
    kind: Kind,
    src: &Sources<'_>,
    files: &[&Arc<Block>],
    seeded: Seeded<'_>,
) -> Result<Option<SeriesData>, StoreError> {
    let seed = match seeded {
        Seeded::No => None,
        Seeded::Before(old) | Seeded::Interleaved(old) => Some(old),
    };
    let Some(mut acc) = Acc::new(kind) else {
        return Ok(None);
    };
    let slice = |ts: i64| part_start(ts, period_ms);
    // Seed and finer rollups: aggregates and histograms already in slices of a finer period;
    // `keep` picks the slices (by start) to fold in.
    let fold_rollup = |acc: &mut Acc,
                       b: &Block,
                       in_order: bool,
                       keep: &mut dyn FnMut(i64) -> bool|
     -> Result<(), StoreError> {
        for e in b.entries_of(id) {
            match read_chunk(b, e)? {
                ChunkData::Aggregates(v) => {
                    for (t, s) in v
                        .iter()
                        .filter(|(t, _)| !blocks.hidden(id, *t, b.content_generation))
                    {
                        if keep(*t) {
                            acc.add_numeric(slice(*t), s, in_order);
                        }
                    }
                }
                ChunkData::Histogram(v) => {
                    for (t, h) in v
                        .iter()
                        .filter(|(t, _)| !blocks.hidden(id, *t, b.content_generation))
                    {
                        if keep(*t) {
                            acc.add_histogram(slice(*t), h);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    };
    // Over finer rollups, a newer finer file is a whole partition rebuilt (not a delta, as a
    // newer base block is): it replaces the old rollup's slices in its range instead of adding
    // to them, or they would count twice. An old slice only partly inside such a range (a
    // period that does not divide the finer partition) is kept whole and the finer slices
    // inside it left out: the late data there is missed rather than the old data lost.
    let replaced: Vec<(i64, i64)> = if seed.is_some() && !src.from_base {
        files
            .iter()
            .map(|b| (b.id.partition_start_ms, b.partition_end_ms))
            .collect()
    } else {
        Vec::new()
    };
    let mut kept_whole: Vec<(i64, i64)> = Vec::new();
    if let Some(old) = seed {
        let mut keep_old = |t: i64| {
            let end = t.saturating_add(period_ms);
            let inside = replaced.iter().any(|&(s, e)| s <= t && end <= e);
            let overlaps = replaced.iter().any(|&(s, e)| t < e && s < end);
            if overlaps && !inside {
                kept_whole.push((t, end));
            }
            !inside
        };
        fold_rollup(&mut acc, old, false, &mut keep_old)?;
    }
    // Seeded, new data may interleave with the old slices (no step between them) unless it is
    // known to come after them.
    let in_order = !matches!(seeded, Seeded::Interleaved(_));
    if !src.from_base {
        let mut keep_new = |t: i64| !kept_whole.iter().any(|&(s, e)| s <= t && t < e);
        for b in files {
            fold_rollup(&mut acc, b, in_order, &mut keep_new)?;
        }
        return Ok(acc.into_data());
    }
    let mut runs: Vec<Vec<(i64, f64)>> = Vec::new();
    for b in files {
        for e in b.entries_of(id) {
            match read_chunk(b, e)? {
                ChunkData::Numeric(points) => runs.push(
                    points
                        .into_iter()
                        .filter(|(t, _)| !blocks.hidden(id, *t, b.content_generation))
                        .collect(),
                ),
                ChunkData::Histogram(periods) => {
                    for (t, h) in periods {
                        if !blocks.hidden(id, t, b.content_generation) {
                            acc.add_histogram(slice(t), &h);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let samples = merge_runs(runs);
    let mut rest = &samples[..];
    while let Some(&(t0, _)) = rest.first() {
        let end = slice(t0).saturating_add(period_ms);
        let n = rest.partition_point(|p| p.0 < end);
        if let Some(s) = SliceAggregate::of_samples(&rest[..n]) {
            acc.add_numeric(slice(t0), &s, in_order);
        }
        rest = &rest[n..];
    }
    Ok(acc.into_data())
}

/// The kinds of the series that files hold, by id.
fn series_of(files: &[&Arc<Block>]) -> BTreeMap<SeriesId, Kind> {
    let mut out = BTreeMap::new();
    for b in files {
        for e in b.entries() {
            out.entry(e.series).or_insert(e.kind);
        }
    }
    out
}

impl Inner {
    fn level_expired_before(&self, level: usize, now_ms: i64) -> i64 {
        // The finer data of level 0 is the raw numeric (shortest) and base histograms.
        let finer_retention_ms = if level == 0 {
            self.opts
                .raw_numeric_retention_ms
                .min(self.opts.base_retention_ms)
        } else {
            self.opts.levels[level - 1].retention_ms
        };
        now_ms.saturating_sub(finer_retention_ms)
    }

    /// See `Store::build_rollups`; at most `partitions_max` partitions per level.
    pub(crate) fn build_rollups(
        &self,
        now_ms: i64,
        partitions_max: usize,
    ) -> Result<RollupReport, StoreError> {
        let _serial = self.flush_lock.lock().map_err(|_| StoreError::Poisoned)?;
        let mut report = RollupReport::default();
        let cutoff_ms = now_ms.saturating_sub(self.opts.rollup_grace_ms);
        for level in 0..self.opts.levels.len() {
            let blocks = self
                .state
                .read()
                .map_err(|_| StoreError::Poisoned)?
                .blocks
                .clone();
            let Some(l) = blocks.levels.get(level) else {
                break;
            };
            let due = due_partitions(&blocks, level, cutoff_ms, partitions_max);
            if due.is_empty() {
                continue;
            }
            let expired_before = self.level_expired_before(level, now_ms);
            self.build_level(&blocks, level, l, &due, expired_before, &mut report)?;
        }
        Ok(report)
    }

    fn build_level(
        &self,
        blocks: &Blocks,
        level: usize,
        l: &LevelBlocks,
        due: &[i64],
        expired_before_ms: i64,
        report: &mut RollupReport,
    ) -> Result<(), StoreError> {
        let vfs = &*self.opts.vfs;
        let generation = self
            .state
            .read()
            .map_err(|_| StoreError::Poisoned)?
            .manifest
            .next_generation;
        let ldir = level_dir(&self.dir, l.period_ms);
        vfs.create_dir_all(&ldir).map_err(StoreError::Io)?;
        let mut written: Vec<BlockRef> = Vec::with_capacity(due.len());
        for (i, &start) in due.iter().enumerate() {
            let end = start.saturating_add(l.partition_ms);
            let src = sources(blocks, level, start, end);
            let old = l.by_partition.get(&start);
            // Keep the old rollup and fold in only what is newer where the finer data has
            // expired, and where that is exact: the finest level's partition still filling,
            // after a flush (a rebuild from every block of the day after every flush would cost
            // in proportion to the day, not to what is new).
            let extends = level == 0 && old.is_some_and(|o| extends_exactly(blocks, o));
            let incremental = old.is_some() && (start < expired_before_ms || extends);
            let files: Vec<&Arc<Block>> = match old {
                Some(o) if incremental => src
                    .files
                    .iter()
                    .copied()
                    .filter(|b| b.content_generation > o.content_generation)
                    .collect(),
                _ => src.files.clone(),
            };
            let seed = if incremental { old } else { None };
            let mut all_files = files.clone();
            all_files.extend(seed);
            let id = BlockId {
                partition_start_ms: start,
                generation,
            };
            let block_err = |error| StoreError::Block {
                block: id.file_name(),
                error,
            };
            let mut w = BlockWriter::create(vfs, &ldir, id, end, l.period_ms).map_err(block_err)?;
            if level == 0 {
                // The finest level serves the reads of the last hours (its partition is built
                // while it fills): its slices hold few observations each, whose packed bins
                // decode with one walk each. Coarser slices merge hours of data — counts too
                // wide for the packed fast path — and are read a few per series, where the
                // Rice-coded chunks (a block writer's default) are about half the bytes.
                w = w.with_packed_histograms();
            }
            for (series, kind) in series_of(&all_files) {
                let seeded = match seed {
                    Some(old) if extends => Seeded::Before(old),
                    Some(old) => Seeded::Interleaved(old),
                    None => Seeded::No,
                };
                if let Some(data) =
                    build_series(blocks, l.period_ms, series, kind, &src, &files, seeded)?
                {
                    let slices = match kind {
                        Kind::Numeric => ROLLUP_NUMERIC_CHUNK_SLICES,
                        _ => ROLLUP_CHUNK_SLICES,
                    };
                    let split_ms = l.period_ms.saturating_mul(slices);
                    w.add_split(series, &data, split_ms).map_err(block_err)?;
                    report.series += 1;
                }
            }
            let (_, stats) = w.finish(vfs).map_err(block_err)?;
            let content_generation = match seed {
                Some(o) => src.content_generation.max(o.content_generation),
                None => src.content_generation,
            };
            written.push(BlockRef {
                id,
                size_bytes: stats.size_bytes,
                content_generation,
            });
            report.partitions += 1;
            report.rebuilt += u64::from(old.is_some());
            report.extended += u64::from(extends);
            report.bytes += stats.size_bytes;
            if i == 0 {
                failpoint("rollup-first-file");
            }
        }
        failpoint("rollup-files-written");
        vfs.sync_dir(&ldir).map_err(StoreError::Io)?;
        failpoint("rollup-dir-synced");
        let mut opened = Vec::with_capacity(written.len());
        for r in &written {
            let mut b = Block::open(vfs, &ldir.join(r.id.file_name())).map_err(|error| {
                StoreError::Block {
                    block: r.id.file_name(),
                    error,
                }
            })?;
            assert_eq!(b.size_bytes, r.size_bytes);
            b.content_generation = r.content_generation;
            opened.push(Arc::new(b));
        }
        let replaced = self.commit(|m, b| {
            let lm = &mut m.levels[level];
            let lb = &mut b.levels[level];
            let mut replaced = Vec::new();
            for (r, block) in written.iter().zip(&opened) {
                let start = r.id.partition_start_ms;
                if let Some(at) = lm
                    .rollups
                    .iter()
                    .position(|x| x.id.partition_start_ms == start)
                {
                    replaced.push(lm.rollups.remove(at));
                }
                lm.rollups.push(r.clone());
                lb.by_partition.insert(start, block.clone());
            }
            lm.rollups.sort_by_key(|r| r.id.partition_start_ms);
            m.next_generation = generation + 1;
            replaced
        })?;
        failpoint("rollup-committed");
        // Housekeeping: a file left here is deleted on the next open.
        for r in replaced {
            let _ = vfs.remove_file(&ldir.join(r.id.file_name()));
        }
        failpoint("rollup-cleaned");
        Ok(())
    }

    /// Replaces the manifest (the commit point) and then the readers' block set with `change`
    /// applied to both. Callers hold `flush_lock`.
    pub(crate) fn commit<T>(
        &self,
        change: impl FnOnce(&mut Manifest, &mut Blocks) -> T,
    ) -> Result<T, StoreError> {
        let (mut manifest, mut blocks) = {
            let state = self.state.read().map_err(|_| StoreError::Poisoned)?;
            (state.manifest.clone(), Blocks::clone(&state.blocks))
        };
        let out = change(&mut manifest, &mut blocks);
        blocks.tombstones = manifest.tombstones.clone();
        manifest
            .store(&*self.opts.vfs, &self.dir)
            .map_err(StoreError::Io)?;
        let mut state = self.state.write().map_err(|_| StoreError::Poisoned)?;
        state.manifest = manifest;
        state.blocks = Arc::new(blocks);
        Ok(out)
    }

    /// See `Store::apply_retention`.
    pub(crate) fn apply_retention(&self, now_ms: i64) -> Result<RetentionReport, StoreError> {
        let _serial = self.flush_lock.lock().map_err(|_| StoreError::Poisoned)?;
        let vfs = &*self.opts.vfs;
        let mut report = RetentionReport::default();
        let blocks = self
            .state
            .read()
            .map_err(|_| StoreError::Poisoned)?
            .blocks
            .clone();
        // Raw numeric first: base partitions past its retention that still hold numeric chunks
        // are rewritten without them, once level 0 holds their rollup.
        let numeric_before = now_ms.saturating_sub(self.opts.raw_numeric_retention_ms);
        let base_before = now_ms.saturating_sub(self.opts.base_retention_ms);
        for (&start, files) in &blocks.by_partition {
            let end = start.saturating_add(blocks.partition_ms);
            if end > numeric_before || end <= base_before {
                continue;
            }
            let has_numeric = files
                .iter()
                .any(|b| b.entries().iter().any(|e| e.kind == Kind::Numeric));
            if !has_numeric || !self.rolled_up(&blocks, start, end) {
                continue;
            }
            report.bytes_freed += self.compact_partition(start, true)?;
            report.numeric_partitions_dropped += 1;
            self.past.changed_everywhere();
        }
        let blocks = self
            .state
            .read()
            .map_err(|_| StoreError::Poisoned)?
            .blocks
            .clone();
        let mut drop_base: Vec<Arc<Block>> = Vec::new();
        for (&start, files) in &blocks.by_partition {
            if start.saturating_add(blocks.partition_ms) <= base_before {
                drop_base.extend(files.iter().cloned());
            }
        }
        let mut drop_rollups: Vec<(usize, Arc<Block>)> = Vec::new();
        for (i, l) in blocks.levels.iter().enumerate() {
            let Some(opts) = self.opts.levels.get(i) else {
                continue;
            };
            let before = now_ms.saturating_sub(opts.retention_ms);
            for (&start, b) in &l.by_partition {
                if start.saturating_add(l.partition_ms) <= before {
                    drop_rollups.push((i, b.clone()));
                }
            }
        }
        if drop_base.is_empty() && drop_rollups.is_empty() {
            return Ok(report);
        }
        self.commit(|m, b| {
            let gone: BTreeSet<BlockId> = drop_base.iter().map(|x| x.id).collect();
            m.blocks.retain(|r| !gone.contains(&r.id));
            for x in &drop_base {
                if let Some(v) = b.by_partition.get_mut(&x.id.partition_start_ms) {
                    v.retain(|y| y.id != x.id);
                    if v.is_empty() {
                        b.by_partition.remove(&x.id.partition_start_ms);
                    }
                }
            }
            for (i, x) in &drop_rollups {
                m.levels[*i].rollups.retain(|r| r.id != x.id);
                b.levels[*i].by_partition.remove(&x.id.partition_start_ms);
            }
        })?;
        self.past.changed_everywhere();
        failpoint("retention-committed");
        for x in &drop_base {
            report.bytes_freed += x.size_bytes;
            report.base_blocks_dropped += 1;
            let _ = vfs.remove_file(&self.dir.join(BLOCKS_DIR).join(x.id.file_name()));
        }
        for (i, x) in &drop_rollups {
            report.bytes_freed += x.size_bytes;
            report.rollups_dropped += 1;
            let ldir = level_dir(&self.dir, blocks.levels[*i].period_ms);
            let _ = vfs.remove_file(&ldir.join(x.id.file_name()));
        }
        Ok(report)
    }

    /// Whether level 0 (if any) holds an up-to-date rollup of the base range.
    fn rolled_up(&self, blocks: &Blocks, start_ms: i64, end_ms: i64) -> bool {
        let Some(l) = blocks.levels.first() else {
            return true;
        };
        let p = part_start(start_ms, l.partition_ms);
        l.by_partition.get(&p).is_some_and(|r| {
            r.content_generation >= blocks.base_content_generation(start_ms, end_ms)
        })
    }
}

/// Level partitions due for a build: with source data, and either not built or older than their
/// sources or a tombstone in range; ended before `cutoff_ms`, except at the finest level, where
/// a partition still filling (begun before `cutoff_ms`) is built from the blocks it has so far.
///
/// Why the exception: the finest level's partition is a day, so without it every read of the
/// last hours — a dashboard's usual range — would merge base periods (60 per hour per series).
/// A partial rollup is exact for the blocks it was built from, and reads use a rollup only
/// while no newer block or tombstone exists in its partition (`content_generation`); the head
/// is never in blocks and is always read on its own. A flush makes it stale until the next
/// build (the background maintenance tick), which rebuilds it from the day's blocks. Coarser
/// levels (partitions of 12 and 288 days) wait for complete partitions: rebuilding them after
/// every flush would cost far more than it saves.
fn due_partitions(blocks: &Blocks, level: usize, cutoff_ms: i64, max: usize) -> Vec<i64> {
    let l = &blocks.levels[level];
    let mut candidates: BTreeSet<i64> = l.by_partition.keys().copied().collect();
    if level == 0 {
        candidates.extend(
            blocks
                .by_partition
                .keys()
                .map(|&s| part_start(s, l.partition_ms)),
        );
    } else {
        candidates.extend(
            blocks.levels[level - 1]
                .by_partition
                .keys()
                .map(|&s| part_start(s, l.partition_ms)),
        );
    }
    candidates
        .into_iter()
        .filter(|&start| {
            let end = start.saturating_add(l.partition_ms);
            let complete = end <= cutoff_ms;
            let partial = level == 0 && start < cutoff_ms;
            if !complete && !partial {
                return false;
            }
            let src = sources(blocks, level, start, end);
            match l.by_partition.get(&start) {
                Some(r) => r.content_generation < src.content_generation,
                None => !src.files.is_empty(),
            }
        })
        .take(max)
        .collect()
}
