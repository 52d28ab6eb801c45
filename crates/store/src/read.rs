//! Reads over blocks, frozen heads and the head.
//!
//! A [`View`] holds the head's read lock and a snapshot of the block set and the frozen heads,
//! taken together. Writers apply a whole batch under the write lock after it is durable, and a
//! flush swaps the head and publishes blocks under the same locks, so a view sees every batch
//! acknowledged before it was taken, no batch partly, and nothing new while it lives: every
//! read through one view is one consistent snapshot, across all the series it asks for. Keep
//! views short; writers wait for them.
//!
//! Sources are read oldest first — blocks by generation, then frozen heads, then the head — so
//! the duplicate rule (the later write wins a millisecond) holds across them: every record in a
//! later source has a higher journal offset than every record in an earlier one.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLockReadGuard};

use hist::{Accumulator, Histogram};

use crate::aggregate::{NumericAggregate, SliceAggregate};
use crate::block::{Block, BlockError, BlockId, ChunkData};
use crate::blockset::{Blocks, Frozen};
use crate::head::{Head, SeriesHead};
use crate::points::Points;
use crate::series::SeriesId;
use crate::StoreError;

/// A head text series' points in `[start_ms, end_ms)`.
fn text_in_range(points: &Points<String>, start_ms: i64, end_ms: i64) -> Vec<(i64, String)> {
    points.map_in_range(start_ms, end_ms, |p| (p.ts_ms, p.value.clone()))
}

/// Bound on the slices one read may ask for (per series).
pub const SLICES_MAX: u64 = 1 << 20;

/// The latest value of a series.
#[derive(Clone, Debug, PartialEq)]
pub enum Latest {
    Numeric {
        ts_ms: i64,
        value: f64,
    },
    Text {
        ts_ms: i64,
        value: String,
    },
    /// The newest base period's merged histogram.
    Histogram {
        period_start_ms: i64,
        value: Histogram,
    },
}

/// Slices `[start_ms, end_ms)` at `period_ms`: both ends multiples of the period, the period a
/// multiple of the base period (so each base period falls in exactly one slice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slicing {
    pub start_ms: i64,
    pub end_ms: i64,
    pub period_ms: i64,
}

impl Slicing {
    pub(crate) fn check(&self, base_period_ms: i64) -> Result<usize, StoreError> {
        let p = self.period_ms;
        if p <= 0 || p % base_period_ms != 0 {
            return Err(StoreError::BadRange(
                "period is not a multiple of the base period",
            ));
        }
        if self.start_ms.rem_euclid(p) != 0 || self.end_ms.rem_euclid(p) != 0 {
            return Err(StoreError::BadRange(
                "start and end must be multiples of the period",
            ));
        }
        if self.end_ms < self.start_ms {
            return Err(StoreError::BadRange("end before start"));
        }
        let slices = (self.end_ms as i128 - self.start_ms as i128) / p as i128;
        if slices > SLICES_MAX as i128 {
            return Err(StoreError::BadRange("more than SLICES_MAX slices"));
        }
        Ok(slices as usize)
    }

    /// Whether the level slice `[t, t + period)` lies inside `range` and inside one slice.
    fn holds(&self, t: i64, period_ms: i64, (start_ms, end_ms): (i64, i64)) -> bool {
        let last = t.saturating_add(period_ms - 1);
        t >= start_ms && last < end_ms && self.slice_of(t) == self.slice_of(last)
    }

    fn slice_of(&self, ts_ms: i64) -> usize {
        ((ts_ms as i128 - self.start_ms as i128) / self.period_ms as i128) as usize
    }
}

pub struct View<'a> {
    head: RwLockReadGuard<'a, Head>,
    frozen: Vec<Arc<Frozen>>,
    blocks: Arc<Blocks>,
    damaged: &'a Mutex<HashSet<(BlockId, SeriesId)>>,
    /// Per-slice reads may use rollups (see `exact`).
    use_rollups: bool,
    /// Rollup slices read so far (to see which level a read used).
    rollup_slices_read: AtomicU64,
}

/// Adds `a` to slice `i` of `out`; pieces come in time order (`then`), except where they
/// overlap (then the increases just add).
fn put(out: &mut [Option<SliceAggregate>], i: usize, a: &SliceAggregate) {
    out[i] = Some(match &out[i] {
        Some(acc) if acc.agg.last_ts_ms < a.agg.first_ts_ms => acc.then(a),
        Some(acc) => SliceAggregate {
            agg: acc.agg.combine(&a.agg),
            increase: acc.increase + a.increase,
        },
        None => *a,
    });
}

/// Keeps, of samples with the same timestamp, the one from the latest source. `runs` are each
/// sorted and given oldest source first.
pub(crate) fn merge_runs<T>(mut runs: Vec<Vec<(i64, T)>>) -> Vec<(i64, T)> {
    runs.retain(|r| !r.is_empty());
    if runs.len() <= 1 {
        return runs.pop().unwrap_or_default();
    }
    // The common case: runs from consecutive partitions, each after the one before — no
    // timestamp shared, so nothing to resolve: concatenate.
    let ordered = runs.windows(2).all(|w| match (w[0].last(), w[1].first()) {
        (Some(a), Some(b)) => a.0 < b.0,
        _ => true,
    });
    if ordered {
        let total = runs.iter().map(Vec::len).sum::<usize>();
        let mut runs = runs.into_iter();
        let mut out = runs.next().unwrap_or_default();
        out.reserve(total - out.len());
        for run in runs {
            out.extend(run);
        }
        return out;
    }
    let mut all: Vec<(i64, usize, T)> = Vec::with_capacity(runs.iter().map(Vec::len).sum());
    for (rank, run) in runs.into_iter().enumerate() {
        all.extend(run.into_iter().map(|(t, v)| (t, rank, v)));
    }
    all.sort_by_key(|&(t, rank, _)| (t, rank));
    let mut out: Vec<(i64, T)> = Vec::with_capacity(all.len());
    for (t, _, v) in all {
        match out.last_mut() {
            Some(last) if last.0 == t => last.1 = v,
            _ => out.push((t, v)),
        }
    }
    out
}

/// Samples of one series from one source, ascending.
type Run<T> = Vec<(i64, T)>;

fn series_head(head: &Head, id: SeriesId) -> Option<&SeriesHead> {
    head.series.get(&id)
}

impl<'a> View<'a> {
    pub(crate) fn new(
        head: RwLockReadGuard<'a, Head>,
        frozen: Vec<Arc<Frozen>>,
        blocks: Arc<Blocks>,
        damaged: &'a Mutex<HashSet<(BlockId, SeriesId)>>,
    ) -> View<'a> {
        View {
            head,
            frozen,
            blocks,
            damaged,
            use_rollups: true,
            rollup_slices_read: AtomicU64::new(0),
        }
    }

    /// Rollup slices this view has read so far (numeric and histogram).
    pub fn rollup_slices_read(&self) -> u64 {
        self.rollup_slices_read.load(Ordering::Relaxed)
    }

    /// The same view reading only base data (never rollups): exact numeric aggregates rather
    /// than sums of rollup slices (equal up to float rounding); histograms are the same either
    /// way, only slower.
    pub fn exact(mut self) -> View<'a> {
        self.use_rollups = false;
        self
    }

    /// The level a per-slice read at `period_ms` starts from: the coarsest whose period divides
    /// it (`None`: base data).
    pub fn level_for(&self, period_ms: i64) -> Option<usize> {
        if !self.use_rollups {
            return None;
        }
        // Any level no coarser than the period: its slices that fall inside one column are
        // used whole, the others (straddling two columns) are read from finer data.
        self.blocks
            .levels
            .iter()
            .rposition(|l| l.period_ms <= period_ms)
    }

    /// Rollup levels: `(period_ms, partition_ms, files)`.
    pub fn levels(&self) -> Vec<(i64, i64, usize)> {
        self.blocks
            .levels
            .iter()
            .map(|l| (l.period_ms, l.partition_ms, l.by_partition.len()))
            .collect()
    }

    /// The level-`level` partitions meeting `[start_ms, end_ms)`, clipped to it, each with its
    /// fresh rollup for `id` if there is one.
    fn level_parts(
        &self,
        level: usize,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
    ) -> Vec<(i64, i64, Option<&Arc<Block>>)> {
        let l = &self.blocks.levels[level];
        let mut out = Vec::new();
        let mut p = start_ms - start_ms.rem_euclid(l.partition_ms);
        while p < end_ms {
            let next = p.saturating_add(l.partition_ms);
            out.push((
                p.max(start_ms),
                next.min(end_ms),
                self.blocks.fresh_rollup(level, p, id),
            ));
            if next == p {
                break;
            }
            p = next;
        }
        out
    }

    /// Decoded rollup chunks of `id` meeting `[start_ms, end_ms)`.
    fn rollup_chunks(
        &self,
        block: &Block,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<ChunkData>, StoreError> {
        let mut out = Vec::new();
        for entry in block.entries_of(id) {
            if entry.last_ts_ms < start_ms || entry.first_ts_ms >= end_ms {
                continue;
            }
            out.push(self.read_chunk(block, entry)?);
        }
        Ok(out)
    }

    /// Merges `id`'s histograms from blocks and rollups (not the heads) in `[start_ms, end_ms)`
    /// into `out`'s slices, starting at `level` and falling back to finer data where a level
    /// has no fresh rollup.
    fn fill_histograms(
        &self,
        id: SeriesId,
        slicing: &Slicing,
        (start_ms, end_ms): (i64, i64),
        level: Option<usize>,
        out: &mut [Accumulator],
    ) -> Result<(), StoreError> {
        let Some(level) = level else {
            return self.accumulate_base_histograms(id, slicing, (start_ms, end_ms), out);
        };
        let period_ms = self.blocks.levels[level].period_ms;
        let partition_ms = self.blocks.levels[level].partition_ms;
        for (s, e, rollup) in self.level_parts(level, id, start_ms, end_ms) {
            // A stale rollup of the finest level may still serve, with the newer flush blocks
            // added on top (`Blocks::extendable_rollup`): a flush does not send the reads of the
            // last hours back to base periods until the next rollup build.
            let (rollup, newer) = match rollup {
                Some(b) => (Some(b), Vec::new()),
                None if level == 0 => match self
                    .blocks
                    .extendable_rollup(s - s.rem_euclid(partition_ms), id)
                {
                    Some((b, newer)) => (Some(b), newer),
                    None => (None, Vec::new()),
                },
                None => (None, Vec::new()),
            };
            let Some(b) = rollup else {
                self.fill_histograms(id, slicing, (s, e), level.checked_sub(1), out)?;
                continue;
            };
            let straddling = self.add_rollup_histograms(b, id, slicing, (s, e), period_ms, out)?;
            if !newer.is_empty() {
                // Straddling slices are read from finer data below, newer blocks included.
                self.check_quarantine(s, e)?;
                for block in newer {
                    for entry in block.entries_of(id) {
                        if entry.last_ts_ms < s || entry.first_ts_ms >= e {
                            continue;
                        }
                        let slot_of = |t: i64| {
                            let straddles = straddling
                                .iter()
                                .any(|&u| u <= t && t < u.saturating_add(period_ms));
                            (s <= t && t < e && !straddles).then(|| slicing.slice_of(t))
                        };
                        self.accumulate_chunk(block, entry, slot_of, out)?;
                    }
                }
            }
            for t in straddling {
                let part = (t.max(s), t.saturating_add(period_ms).min(e));
                self.fill_histograms(id, slicing, part, level.checked_sub(1), out)?;
            }
        }
        Ok(())
    }

    /// Adds the slices of rollup `b` for `id` that fit inside the columns of `slicing` in
    /// `[s, e)` into `out`; returns the starts of the slices that straddle a column (to be read
    /// from finer data).
    fn add_rollup_histograms(
        &self,
        b: &Arc<Block>,
        id: SeriesId,
        slicing: &Slicing,
        (s, e): (i64, i64),
        period_ms: i64,
        out: &mut [Accumulator],
    ) -> Result<Vec<i64>, StoreError> {
        let from = s.saturating_sub(period_ms - 1);
        // Rollup slices go straight from the chunk into the accumulators; a slice that
        // straddles a column is read from finer data instead, after.
        let mut straddling = Vec::new();
        let entries = b.entries_of(id);
        let lo = entries.partition_point(|x| x.last_ts_ms < from);
        let hi = entries.partition_point(|x| x.first_ts_ms < e).max(lo);
        let entries = &entries[lo..hi];
        // A short read of many series decodes thousands of small rollup chunks: one file read
        // per series, not per chunk.
        let span = match entries.first() {
            Some(first) => self.chunk_result(b, first, |b, _| b.read_span(entries))?,
            None => None,
        };
        for entry in entries {
            let slot_of = |t: i64| {
                if t < from || t >= e {
                    return None;
                }
                if slicing.holds(t, period_ms, (s, e)) {
                    self.rollup_slices_read.fetch_add(1, Ordering::Relaxed);
                    return Some(slicing.slice_of(t));
                }
                straddling.push(t);
                None
            };
            // (A directory whose offsets do not ascend reads chunk by chunk.)
            let chunk = span.as_ref().and_then(|(at, bytes)| {
                let from = usize::try_from(entry.offset.checked_sub(*at)?).ok()?;
                bytes.get(from..from.checked_add(entry.size_bytes as usize)?)
            });
            match chunk {
                Some(chunk) => self.chunk_result(b, entry, |b, entry| {
                    b.accumulate_histogram_bytes(entry, chunk, slot_of, out)
                })?,
                None => self.accumulate_chunk(b, entry, slot_of, out)?,
            }
        }
        Ok(straddling)
    }

    /// Base-period histograms of `id` from blocks in `[start_ms, end_ms)` added into `out`'s
    /// slices: decoded straight into the accumulators, except from a block a tombstone touches
    /// (decoded whole, hidden periods dropped, as `block_chunks` does).
    fn accumulate_base_histograms(
        &self,
        id: SeriesId,
        slicing: &Slicing,
        (start_ms, end_ms): (i64, i64),
        out: &mut [Accumulator],
    ) -> Result<(), StoreError> {
        if end_ms <= start_ms {
            return Ok(());
        }
        let touched = |generation: u64| {
            self.blocks
                .tombstones
                .iter()
                .any(|t| t.overlaps(id, start_ms, end_ms, generation))
        };
        let blocks = self.blocks.overlapping(start_ms, end_ms);
        if blocks.iter().any(|b| touched(b.content_generation)) {
            for chunk in self.block_chunks(id, start_ms, end_ms)? {
                if let ChunkData::Histogram(periods) = chunk {
                    for (t, h) in clip(periods, start_ms, end_ms) {
                        out[slicing.slice_of(t)].add(&h);
                    }
                }
            }
            return Ok(());
        }
        self.check_quarantine(start_ms, end_ms)?;
        for block in blocks {
            for entry in block.entries_of(id) {
                if entry.last_ts_ms < start_ms || entry.first_ts_ms >= end_ms {
                    continue;
                }
                let slot_of = |t: i64| (start_ms <= t && t < end_ms).then(|| slicing.slice_of(t));
                self.accumulate_chunk(block, entry, slot_of, out)?;
            }
        }
        Ok(())
    }

    /// Whether a head holds numeric samples of `id` in `[start_ms, end_ms)`.
    fn heads_have_numeric(&self, id: SeriesId, start_ms: i64, end_ms: i64) -> bool {
        self.heads().any(|h| match series_head(h, id) {
            Some(SeriesHead::Numeric(series)) => series.has_in_range(start_ms, end_ms),
            _ => false,
        })
    }

    /// Like `fill_histograms` for numeric aggregates; base ranges include the heads. A rollup
    /// is not used where a head holds samples in its range (a head sample may replace one the
    /// rollup counted: the duplicate rule).
    fn fill_numeric(
        &self,
        id: SeriesId,
        slicing: &Slicing,
        (start_ms, end_ms): (i64, i64),
        level: Option<usize>,
        out: &mut [Option<SliceAggregate>],
    ) -> Result<(), StoreError> {
        let Some(level) = level else {
            let raw = self.raw_numeric(id, start_ms, end_ms)?;
            let mut rest = &raw[..];
            while let Some(&(t0, _)) = rest.first() {
                let i = slicing.slice_of(t0);
                let slice_end = slicing
                    .start_ms
                    .saturating_add((i as i64 + 1).saturating_mul(slicing.period_ms));
                let n = rest.partition_point(|p| p.0 < slice_end);
                if let Some(s) = SliceAggregate::of_samples(&rest[..n]) {
                    put(out, i, &s);
                }
                rest = &rest[n..];
            }
            return Ok(());
        };
        let period_ms = self.blocks.levels[level].period_ms;
        for (s, e, rollup) in self.level_parts(level, id, start_ms, end_ms) {
            match rollup.filter(|_| !self.heads_have_numeric(id, s, e)) {
                Some(b) => {
                    let from = s.saturating_sub(period_ms - 1);
                    for chunk in self.rollup_chunks(b, id, from, e)? {
                        if let ChunkData::Aggregates(slices) = chunk {
                            // In time order, straddling slices from finer data in their place.
                            for (t, a) in clip(slices, from, e) {
                                if slicing.holds(t, period_ms, (s, e)) {
                                    self.rollup_slices_read.fetch_add(1, Ordering::Relaxed);
                                    put(out, slicing.slice_of(t), &a);
                                } else {
                                    let part = (t.max(s), t.saturating_add(period_ms).min(e));
                                    self.fill_numeric(
                                        id,
                                        slicing,
                                        part,
                                        level.checked_sub(1),
                                        out,
                                    )?;
                                }
                            }
                        }
                    }
                }
                None => self.fill_numeric(id, slicing, (s, e), level.checked_sub(1), out)?,
            }
        }
        Ok(())
    }

    pub fn base_period_ms(&self) -> i64 {
        self.head.base_period_ms
    }

    /// Heads oldest first: frozen ones, then the live one.
    fn heads(&self) -> impl Iterator<Item = &Head> {
        self.frozen
            .iter()
            .map(|f| &f.head)
            .chain(std::iter::once(&*self.head))
    }

    /// Decoded chunks of `id` meeting `[start_ms, end_ms)`, oldest block generation first.
    fn block_chunks(
        &self,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<ChunkData>, StoreError> {
        let mut out = Vec::new();
        if end_ms <= start_ms {
            return Ok(out);
        }
        self.check_quarantine(start_ms, end_ms)?;
        for block in self.blocks.overlapping(start_ms, end_ms) {
            let deleted = self
                .blocks
                .tombstones
                .iter()
                .any(|t| t.overlaps(id, start_ms, end_ms, block.content_generation));
            for entry in block.entries_of(id) {
                if entry.last_ts_ms < start_ms || entry.first_ts_ms >= end_ms {
                    continue;
                }
                let chunk = self.read_chunk(block, entry)?;
                out.push(if deleted {
                    self.without_deleted(chunk, id, block.content_generation)
                } else {
                    chunk
                });
            }
        }
        Ok(out)
    }

    /// `Quarantined` if a quarantined block's partition meets `[start_ms, end_ms)`: its data
    /// cannot be read, so no answer over that range is complete.
    fn check_quarantine(&self, start_ms: i64, end_ms: i64) -> Result<(), StoreError> {
        match self.blocks.quarantined.iter().find(|q| {
            let p = q.id.partition_start_ms;
            p < end_ms && start_ms < p.saturating_add(self.blocks.partition_ms)
        }) {
            Some(q) => Err(StoreError::Quarantined {
                block: q.id.file_name(),
                start_ms: q.id.partition_start_ms,
                end_ms: q.id.partition_start_ms + self.blocks.partition_ms,
            }),
            None => Ok(()),
        }
    }

    /// A chunk without the samples tombstones hide.
    fn without_deleted(
        &self,
        chunk: ChunkData,
        id: SeriesId,
        content_generation: u64,
    ) -> ChunkData {
        let b = &self.blocks;
        let keep = |t: i64| !b.hidden(id, t, content_generation);
        match chunk {
            ChunkData::Numeric(v) => {
                ChunkData::Numeric(v.into_iter().filter(|p| keep(p.0)).collect())
            }
            ChunkData::Text(v) => ChunkData::Text(v.into_iter().filter(|p| keep(p.0)).collect()),
            ChunkData::Histogram(v) => {
                ChunkData::Histogram(v.into_iter().filter(|p| keep(p.0)).collect())
            }
            ChunkData::Aggregates(v) => {
                ChunkData::Aggregates(v.into_iter().filter(|p| keep(p.0)).collect())
            }
        }
    }

    /// `Block::accumulate_histogram_chunk` with `read_chunk`'s damage bookkeeping.
    fn accumulate_chunk(
        &self,
        block: &Block,
        entry: &crate::block::Entry,
        slot_of: impl FnMut(i64) -> Option<usize>,
        out: &mut [Accumulator],
    ) -> Result<(), StoreError> {
        self.chunk_result(block, entry, |b, e| {
            b.accumulate_histogram_chunk(e, slot_of, out)
        })
    }

    fn read_chunk(
        &self,
        block: &Block,
        entry: &crate::block::Entry,
    ) -> Result<ChunkData, StoreError> {
        self.chunk_result(block, entry, Block::read_chunk)
    }

    /// Runs one chunk read: refused at once for a chunk found damaged before; a new damage is
    /// remembered and reported as `BlockDamaged` for that series and range.
    fn chunk_result<'b, T>(
        &self,
        block: &'b Block,
        entry: &crate::block::Entry,
        read: impl FnOnce(&'b Block, &crate::block::Entry) -> Result<T, BlockError>,
    ) -> Result<T, StoreError> {
        let key = (block.id, entry.series);
        let known_bad = self
            .damaged
            .lock()
            .map_err(|_| StoreError::Poisoned)?
            .contains(&key);
        let damaged = |what: String| StoreError::BlockDamaged {
            block: block.id.file_name(),
            series: entry.series.0,
            start_ms: entry.first_ts_ms,
            end_ms: entry.last_ts_ms.saturating_add(1),
            what,
        };
        if known_bad {
            return Err(damaged("found damaged by an earlier read".into()));
        }
        match read(block, entry) {
            Ok(data) => Ok(data),
            Err(BlockError::Io(e)) => Err(StoreError::Io(e)),
            Err(e) => {
                if let Ok(mut set) = self.damaged.lock() {
                    set.insert(key);
                }
                Err(damaged(format!("{e}")))
            }
        }
    }

    /// The samples of `id` in `[start_ms, end_ms)` from every source, oldest source first, one
    /// sorted run per source: blocks' chunks (`chunk` picks the kind) and heads (`head` picks it).
    fn runs<T: Clone>(
        &self,
        id: SeriesId,
        (start_ms, end_ms): (i64, i64),
        chunk: fn(ChunkData) -> Option<Run<T>>,
        head: fn(&SeriesHead, i64, i64) -> Option<Run<T>>,
    ) -> Result<Vec<Run<T>>, StoreError> {
        let mut runs = Vec::new();
        for data in self.block_chunks(id, start_ms, end_ms)? {
            if let Some(points) = chunk(data) {
                runs.push(clip(points, start_ms, end_ms));
            }
        }
        for h in self.heads() {
            if let Some(run) = series_head(h, id).and_then(|s| head(s, start_ms, end_ms)) {
                if !run.is_empty() {
                    runs.push(run);
                }
            }
        }
        Ok(runs)
    }

    /// Raw numeric samples in `[start_ms, end_ms)`, ascending, one per millisecond.
    pub fn raw_numeric(
        &self,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<(i64, f64)>, StoreError> {
        let runs = self.runs(
            id,
            (start_ms, end_ms),
            |c| match c {
                ChunkData::Numeric(points) => Some(points),
                _ => None,
            },
            |h, start_ms, end_ms| match h {
                SeriesHead::Numeric(series) => Some(series.in_range(start_ms, end_ms)),
                _ => None,
            },
        )?;
        Ok(merge_runs(runs))
    }

    /// Text changes in `[start_ms, end_ms)`: a sample equal to the one before it is left out.
    /// The first sample in range is always returned (its earlier history may be outside).
    pub fn raw_text(
        &self,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let runs = self.runs(
            id,
            (start_ms, end_ms),
            |c| match c {
                ChunkData::Text(points) => Some(points),
                _ => None,
            },
            |h, start_ms, end_ms| match h {
                SeriesHead::Text(points) => Some(text_in_range(points, start_ms, end_ms)),
                _ => None,
            },
        )?;
        let mut out: Vec<(i64, String)> = Vec::new();
        for (t, v) in merge_runs(runs) {
            if out.last().is_none_or(|(_, last)| *last != v) {
                out.push((t, v));
            }
        }
        Ok(out)
    }

    /// The merged histogram of each base period in `[start_ms, end_ms)`, by period start.
    pub fn raw_histograms(
        &self,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<(i64, Histogram)>, StoreError> {
        if end_ms <= start_ms {
            return Ok(Vec::new());
        }
        let mut merged: BTreeMap<i64, Histogram> = BTreeMap::new();
        for chunk in self.block_chunks(id, start_ms, end_ms)? {
            if let ChunkData::Histogram(periods) = chunk {
                for (t, h) in clip(periods, start_ms, end_ms) {
                    match merged.entry(t) {
                        std::collections::btree_map::Entry::Vacant(v) => {
                            v.insert(h);
                        }
                        std::collections::btree_map::Entry::Occupied(mut o) => {
                            o.get_mut().merge(&h)
                        }
                    }
                }
            }
        }
        for head in self.heads() {
            if let Some(SeriesHead::Histogram(series)) = series_head(head, id) {
                for (t, h) in series.periods_in(start_ms, end_ms) {
                    merged.entry(t).or_default().merge(&h);
                }
            }
        }
        Ok(merged.into_iter().collect())
    }

    /// Numeric aggregates per slice (`None` for a slice without samples).
    pub fn numeric_aggregates(
        &self,
        id: SeriesId,
        slicing: Slicing,
    ) -> Result<Vec<Option<NumericAggregate>>, StoreError> {
        Ok(self
            .slice_aggregates(id, slicing)?
            .into_iter()
            .map(|s| s.map(|s| s.agg))
            .collect())
    }

    /// Numeric aggregates per slice with the counter increase inside each slice (from rollups
    /// where a level fits the period).
    pub fn slice_aggregates(
        &self,
        id: SeriesId,
        slicing: Slicing,
    ) -> Result<Vec<Option<SliceAggregate>>, StoreError> {
        let slices = slicing.check(self.head.base_period_ms)?;
        let mut out: Vec<Option<SliceAggregate>> = vec![None; slices];
        let level = self.level_for(slicing.period_ms);
        let range = (slicing.start_ms, slicing.end_ms);
        self.fill_numeric(id, &slicing, range, level, &mut out)?;
        Ok(out)
    }

    /// One merged histogram per slice (empty where nothing was recorded).
    pub fn histograms(&self, id: SeriesId, slicing: Slicing) -> Result<Vec<Histogram>, StoreError> {
        let slices = slicing.check(self.head.base_period_ms)?;
        let mut acc = vec![Accumulator::new(); slices];
        self.accumulate_histograms(id, slicing, &mut acc)?;
        Ok(acc.iter().map(Accumulator::to_histogram).collect())
    }

    /// Merges `id`'s per-slice histograms into `out` (one per slice of `slicing`). Merging many
    /// series is faster through `accumulate_histograms` (one dense accumulator per slice).
    pub fn add_histograms(
        &self,
        id: SeriesId,
        slicing: Slicing,
        out: &mut [Histogram],
    ) -> Result<(), StoreError> {
        let mut acc = vec![Accumulator::new(); out.len()];
        self.accumulate_histograms(id, slicing, &mut acc)?;
        for (h, a) in out.iter_mut().zip(&acc) {
            if !a.is_empty() {
                h.merge(&a.to_histogram());
            }
        }
        Ok(())
    }

    /// Adds `id`'s histograms into `out` (one accumulator per slice of `slicing`), period by
    /// period, with no per-series result: a fetch merging many series adds them all into the
    /// same accumulators.
    pub fn accumulate_histograms(
        &self,
        id: SeriesId,
        slicing: Slicing,
        out: &mut [Accumulator],
    ) -> Result<(), StoreError> {
        let slices = slicing.check(self.head.base_period_ms)?;
        if out.len() != slices {
            return Err(StoreError::BadRange("output length is not the slice count"));
        }
        let level = self.level_for(slicing.period_ms);
        let range = (slicing.start_ms, slicing.end_ms);
        self.fill_histograms(id, &slicing, range, level, out)?;
        for head in self.heads() {
            if let Some(SeriesHead::Histogram(series)) = series_head(head, id) {
                series.accumulate_into(slicing.start_ms, slicing.end_ms, out, |t| {
                    slicing.slice_of(t)
                });
            }
        }
        Ok(())
    }

    /// The newest timestamp (or histogram period start) of a series in any source, from the
    /// block directories and the heads, without decoding.
    fn newest_ts(&self, id: SeriesId) -> Option<i64> {
        let mut newest: Option<i64> = None;
        for block in self.blocks.all() {
            if let Some(e) = block.entries_of(id).last() {
                newest = newest.max(Some(e.last_ts_ms));
            }
        }
        for head in self.heads() {
            let last = match series_head(head, id) {
                Some(SeriesHead::Numeric(s)) => s.last_ts(),
                Some(SeriesHead::Text(p)) => p.last().map(|p| p.ts_ms),
                Some(SeriesHead::Histogram(s)) => s.last_start_ms(),
                None => None,
            };
            newest = newest.max(last);
        }
        newest
    }

    /// The latest value of a series, if it has any.
    pub fn latest(&self, id: SeriesId) -> Result<Option<Latest>, StoreError> {
        let Some(ts) = self.newest_ts(id) else {
            return Ok(None);
        };
        let end = ts.saturating_add(1);
        if let Some((ts_ms, value)) = self.raw_numeric(id, ts, end)?.pop() {
            return Ok(Some(Latest::Numeric { ts_ms, value }));
        }
        if let Some((ts_ms, value)) = self.raw_text(id, ts, end)?.pop() {
            return Ok(Some(Latest::Text { ts_ms, value }));
        }
        Ok(self
            .raw_histograms(id, ts, end)?
            .pop()
            .map(|(period_start_ms, value)| Latest::Histogram {
                period_start_ms,
                value,
            }))
    }

    /// Series with data in memory (the head and frozen heads; blocks not counted).
    pub fn series_count(&self) -> usize {
        self.heads().map(|h| h.series.len()).sum()
    }
}

/// The part of a sorted run inside `[start_ms, end_ms)`.
fn clip<T>(mut run: Vec<(i64, T)>, start_ms: i64, end_ms: i64) -> Vec<(i64, T)> {
    let to = run.partition_point(|p| p.0 < end_ms);
    run.truncate(to);
    let from = run.partition_point(|p| p.0 < start_ms);
    run.drain(..from);
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::counter_step;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = f64> {
        prop_oneof![
            -5.0f64..5.0,
            Just(0.0),
            Just(-0.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            (0i64..100).prop_map(|v| v as f64),
        ]
    }

    /// Whether two least or greatest values agree: equal (a zero of either sign), or both NaN.
    fn same(a: f64, b: f64) -> bool {
        a == b || (a.is_nan() && b.is_nan())
    }

    proptest! {
        /// A slice's aggregate equals one sample-by-sample pass: sums, counter increase, first
        /// and last bit for bit (any NaN for a NaN); the least and greatest equal (their
        /// interleaved chains may pick the other zero of a ±0 tie, as combining slices may).
        #[test]
        fn of_samples_equals_a_sequential_pass(values in proptest::collection::vec(value(), 1..40)) {
            let samples: Vec<(i64, f64)> =
                values.iter().enumerate().map(|(i, &v)| (i as i64 * 10, v)).collect();
            let got = SliceAggregate::of_samples(&samples).unwrap();
            let (t0, v0) = samples[0];
            let mut want = NumericAggregate::of(t0, v0);
            let mut increase = 0.0;
            for w in samples.windows(2) {
                want.add(w[1].0, w[1].1);
                increase += counter_step(w[0].1, w[1].1);
            }
            // Bit for bit, but a NaN is any NaN (Rust leaves arithmetic NaNs' bits open).
            let bits = |x: f64| if x.is_nan() { f64::NAN.to_bits() } else { x.to_bits() };
            prop_assert_eq!(got.agg.count, want.count);
            prop_assert_eq!(bits(got.agg.sum), bits(want.sum));
            prop_assert_eq!(bits(got.agg.sum_squares), bits(want.sum_squares));
            prop_assert_eq!(bits(got.increase), bits(increase));
            prop_assert_eq!(got.agg.first.to_bits(), want.first.to_bits());
            prop_assert_eq!(got.agg.last.to_bits(), want.last.to_bits());
            prop_assert_eq!((got.agg.first_ts_ms, got.agg.last_ts_ms), (want.first_ts_ms, want.last_ts_ms));
            prop_assert!(same(got.agg.min, want.min), "min {} vs {}", got.agg.min, want.min);
            prop_assert!(same(got.agg.max, want.max), "max {} vs {}", got.agg.max, want.max);
        }

        #[test]
        fn merge_runs_keeps_the_latest_source(
            runs in proptest::collection::vec(
                proptest::collection::btree_map(-20i64..20, any::<u8>(), 0..8), 0..5),
            ordered in any::<bool>(),
        ) {
            // Ordered: shift each run past the one before (the concatenation path).
            let mut runs: Vec<Vec<(i64, u8)>> =
                runs.into_iter().map(|m| m.into_iter().collect()).collect();
            if ordered {
                for (i, run) in runs.iter_mut().enumerate() {
                    for p in run.iter_mut() {
                        p.0 += 100 * i as i64;
                    }
                }
            }
            // Model: later runs overwrite earlier ones at the same timestamp.
            let mut model = BTreeMap::new();
            for run in &runs {
                for &(t, v) in run {
                    model.insert(t, v);
                }
            }
            let want: Vec<(i64, u8)> = model.into_iter().collect();
            prop_assert_eq!(merge_runs(runs), want);
        }
    }
}
