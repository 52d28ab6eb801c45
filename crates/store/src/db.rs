//! `Store`: the write path (WAL on the journal, series resolution), the head and its recovery.
//!
//! A write resolves each distinct key of the batch to a series id (creating it in the index),
//! makes new series durable (index fsync) before anything refers to them, appends the batch as
//! one journal record, waits until the journal says the record is durable at the configured
//! level, and only then applies it to the head. Concurrent writers share the journal's group
//! commit: each waits for its own ticket, one fsync covers them all.

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use journal::vfs::Vfs;

use crate::batch::{BatchSample, KeyRef, SampleValue, Value, WriteBatch};
use crate::blockset::{self, Blocks, Frozen};
use crate::cardinality::{CardinalityLimit, CardinalityStats};
use crate::engine::{
    BackgroundFailures, InFlight, Inner, ReplayReport, StoreOptions, BASE_PERIOD_MS_MIN,
};
use crate::flush;
use crate::head::{CumulativeState, Head, Offsets};
use crate::index::{Resolved, SeriesIndex};
use crate::key::StreamKey;
use crate::log::{self, JournalSettings, LogTicket, WalBackend};
use crate::manifest::Manifest;
use crate::read::View;
use crate::series::{Kind, SeriesId};
use crate::sources::{Admission, Origin};
use crate::tagquery::TagQuery;
use crate::wal::{self, Group};
use crate::StoreError;

/// Longest a write waits for another request writing the same batch (same origin) to finish.
const SAME_BATCH_WAIT_MS_MAX: u64 = 60_000;
/// How often the background flusher looks at the head.
const FLUSH_TICK_MS: u64 = 1_000;
/// How often the background flusher builds due rollups and applies retention.
const MAINTENANCE_TICK_MS: u64 = 60_000;
/// Least time between two maintenance passes run because a flush just happened.
const MAINTENANCE_AFTER_FLUSH_GAP_MS: u64 = 10_000;
/// Rollup partitions one background pass builds at most (per level), so flushing is never
/// held up for long; later passes do the rest.
const BACKGROUND_ROLLUP_PARTITIONS_MAX: usize = 8;
/// Most completed base partitions one background pass rewrites as one block. A running server
/// flushes a partition (2 h) in several small blocks: per-chunk coder tables make them ≈ 1.5×
/// the bytes of one block of the whole partition (15-minute flushes: 23.8 against 15.8 bytes
/// per histogram sample), and reads open each.
const BACKGROUND_COMPACT_PARTITIONS_MAX: usize = 2;
/// A batch's entries resolved: the ids to write and what was left out.
struct Settled {
    ids: Vec<SeriesId>,
    kind_rejections: Vec<KindRejection>,
    refused: Vec<CardinalityRefusal>,
}

/// What a write did with its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Applied (durable at the configured level and visible to reads).
    Applied,
    /// The batch's origin was applied before: acknowledged again, nothing applied.
    Duplicate,
}

/// Samples [`Store::write_partial`] left out: their key exists with another kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindRejection {
    /// The canonical key.
    pub key: String,
    pub existing: Kind,
    pub requested: Kind,
    /// How many of the batch's samples named it.
    pub samples: usize,
}

/// Samples [`Store::write_limited`] left out: their key is new and a cardinality limit refused
/// to create it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CardinalityRefusal {
    /// The canonical key.
    pub key: String,
    pub limit: CardinalityLimit,
    /// The limit's bound.
    pub max: u64,
    /// How many of the batch's samples named it.
    pub samples: usize,
}

/// What [`Store::write_limited`] did with a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitedWrite {
    pub written: Written,
    /// Samples of keys that exist with another kind, left out.
    pub kind_rejections: Vec<KindRejection>,
    /// Samples of new keys a cardinality limit refused, left out.
    pub refused: Vec<CardinalityRefusal>,
}

pub struct Store {
    inner: Arc<Inner>,
    flusher: Option<JoinHandle<()>>,
}

impl Store {
    /// Opens or creates a store in `dir` (`dir/wal` the journal, `dir/index` the series index,
    /// `dir/MANIFEST` and `dir/blocks/`), and replays the WAL from the manifest's checkpoint.
    pub fn open(dir: impl AsRef<Path>, opts: StoreOptions) -> Result<Store, StoreError> {
        check_options(&opts)?;
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(StoreError::Io)?;
        let vfs = opts.vfs.clone();
        vfs.create_dir_all(&dir).map_err(StoreError::Io)?;
        let manifest = load_or_create_manifest(&*vfs, &dir, &opts)?;
        let settings = JournalSettings {
            durability: opts.durability,
            segment_size_bytes: opts.wal_segment_size_bytes,
            vfs: vfs.clone(),
        };
        let log = log::open(&dir, opts.wal, settings, manifest.checkpoint)?;
        let index = SeriesIndex::open(&dir.join("index"))?;
        index.set_limits(opts.cardinality)?;
        let series_count = index.snapshot()?.series_count();
        let (state, quarantined) = blockset::open_blocks(&*vfs, &dir, manifest)?;
        let (cumulative, sources) = blockset::load_checkpoint_state(&*vfs, &dir, &state.manifest)?;
        let inner = Inner {
            dir,
            log,
            index,
            gate: RwLock::new(()),
            head: RwLock::new(Head::new(opts.base_period_ms)),
            state: RwLock::new(state),
            cumulative: Mutex::new(cumulative),
            sources: Mutex::new(sources),
            sources_changed: Condvar::new(),
            applied_end: AtomicU64::new(0),
            in_flight: Mutex::new(InFlight::default()),
            head_since: Mutex::new(None),
            series_durable_count: AtomicU32::new(series_count),
            sync_lock: Mutex::new(()),
            flush_lock: Mutex::new(()),
            damaged: Mutex::new(HashSet::new()),
            compact_failed: Mutex::new(HashSet::new()),
            replay: ReplayReport {
                quarantined,
                ..ReplayReport::default()
            },
            stop: (Mutex::new(false), Condvar::new()),
            flush_failing: AtomicBool::new(false),
            background_failures: Mutex::new(BackgroundFailures::default()),
            past: crate::past::PastChanges::default(),
            opts,
        };
        let mut inner = inner;
        inner.note_block_activity()?;
        let report = inner.replay_wal()?;
        inner.replay = ReplayReport {
            quarantined: std::mem::take(&mut inner.replay.quarantined),
            ..report
        };
        let inner = Arc::new(inner);
        let flusher = if inner.opts.background_flush {
            let shared = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name("store-flush".into())
                    .spawn(move || shared.flush_loop())
                    .map_err(StoreError::Io)?,
            )
        } else {
            None
        };
        Ok(Store { inner, flusher })
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn options(&self) -> &StoreOptions {
        &self.inner.opts
    }

    /// Cumulative histograms left out for being older than their series' newest cumulative
    /// submission (their counts are in a newer one's difference), since the store opened,
    /// replay included.
    pub fn cumulative_left_out(&self) -> Result<u64, StoreError> {
        let state = self
            .inner
            .cumulative
            .lock()
            .map_err(|_| StoreError::Poisoned)?;
        Ok(state.left_out())
    }

    pub fn replay_report(&self) -> &ReplayReport {
        &self.inner.replay
    }

    pub fn index(&self) -> &SeriesIndex {
        &self.inner.index
    }

    /// Stops the flusher, writes the head to blocks, syncs the WAL and the index.
    pub fn close(mut self) -> Result<(), StoreError> {
        self.stop_flusher();
        self.inner.flush()?;
        self.inner.index.sync()?;
        let inner = self.inner.clone();
        drop(self);
        // The flusher has stopped and `self` is gone: this is the last reference.
        match Arc::try_unwrap(inner) {
            Ok(inner) => inner.log.close()?,
            Err(_) => unreachable!("the store's state is only shared with its flusher"),
        }
        Ok(())
    }

    fn stop_flusher(&mut self) {
        if let Some(handle) = self.flusher.take() {
            let (lock, cv) = &self.inner.stop;
            if let Ok(mut stop) = lock.lock() {
                *stop = true;
            }
            cv.notify_all();
            // A panicked flusher has nothing left to clean up.
            let _ = handle.join();
        }
    }

    /// Writes a batch; returns once it is durable at the configured level and visible to reads.
    /// A key that exists with another kind fails the whole batch (nothing written). A batch
    /// whose origin (`WriteBatch::set_origin`) was applied before is not applied again.
    pub fn write(&self, batch: &WriteBatch) -> Result<Written, StoreError> {
        self.inner.check_position(None)?;
        let Some(admitted) = self.inner.admit(batch.origin())? else {
            return Ok(Written::Duplicate);
        };
        let ids = self.inner.resolve(batch)?;
        self.inner.write_resolved(batch, &ids, admitted, None)?;
        Ok(Written::Applied)
    }

    /// As [`Store::write`], except that the samples of a key that exists with another kind are
    /// left out (and listed in the result) while the rest of the batch is written — what an
    /// ingest endpoint that reports partial acceptance needs. A duplicate lists nothing.
    pub fn write_partial(
        &self,
        batch: &WriteBatch,
    ) -> Result<(Written, Vec<KindRejection>), StoreError> {
        self.inner.check_position(None)?;
        let Some(admitted) = self.inner.admit(batch.origin())? else {
            return Ok((Written::Duplicate, Vec::new()));
        };
        let (ids, rejected) = self.inner.resolve_partial(batch)?;
        self.inner.write_resolved(batch, &ids, admitted, None)?;
        Ok((Written::Applied, rejected))
    }

    /// As [`Store::write_partial`], holding the series the batch would create to the
    /// cardinality limits (`StoreOptions::cardinality`) for its sender: the batch's origin's
    /// source when it has one, `sender` otherwise. The samples of a refused key are left out
    /// (and listed); every existing series is written as usual.
    pub fn write_limited(
        &self,
        batch: &WriteBatch,
        sender: &str,
    ) -> Result<LimitedWrite, StoreError> {
        self.write_limited_at(batch, sender, None)
    }

    /// The write of a store on an external log (`WalBackend::External`): the batch the caller's
    /// log holds at `position`, written as [`Store::write_limited`] writes it. Nothing is written
    /// to a WAL here: the caller's log is the WAL. Positions must be given in increasing order
    /// (`LogPositionBehind` otherwise); a flush's checkpoint (`FlushReport::checkpoint`,
    /// `StoreStats::checkpoint`) is the position from which the caller replays its log after a
    /// restart. Applying a batch reads only the batch and the store (limits included), so the
    /// same log applied to two stores gives the same series and samples.
    pub fn write_logged(
        &self,
        batch: &WriteBatch,
        position: u64,
        sender: &str,
    ) -> Result<LimitedWrite, StoreError> {
        self.write_limited_at(batch, sender, Some(position))
    }

    fn write_limited_at(
        &self,
        batch: &WriteBatch,
        sender: &str,
        position: Option<u64>,
    ) -> Result<LimitedWrite, StoreError> {
        self.inner.check_position(position)?;
        let Some(admitted) = self.inner.admit(batch.origin())? else {
            return Ok(LimitedWrite {
                written: Written::Duplicate,
                kind_rejections: Vec::new(),
                refused: Vec::new(),
            });
        };
        let source = batch.origin().map_or(sender, |o| o.source.as_str());
        let resolved = self
            .inner
            .resolve_limited(batch, source, limits_now_ms(batch, position))?;
        self.inner
            .write_resolved(batch, &resolved.ids, admitted, position)?;
        Ok(LimitedWrite {
            written: Written::Applied,
            kind_rejections: resolved.kind_rejections,
            refused: resolved.refused,
        })
    }

    /// The cardinality limits' counts (new series this minute, active series, refusals).
    pub fn cardinality_stats(&self) -> Result<CardinalityStats, StoreError> {
        Ok(self.inner.index.cardinality_stats()?.unwrap_or_default())
    }

    /// Background flushes and maintenance passes that failed (a full disk, a failing device).
    pub fn background_failures(&self) -> BackgroundFailures {
        self.inner
            .background_failures
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default()
    }

    /// Sources whose applied batches the store keeps (exactly-once state).
    pub fn source_count(&self) -> Result<usize, StoreError> {
        Ok(self
            .inner
            .sources
            .lock()
            .map_err(|_| StoreError::Poisoned)?
            .len())
    }

    /// The id of `key` (created, with `kind`, if new), for [`WriteBatch::push_id`]: a caller
    /// that sends the same series again and again (a connection, a scrape target) resolves its
    /// keys once. Ids are stable for the life of the store.
    pub fn resolve(&self, key: &StreamKey, kind: Kind) -> Result<SeriesId, StoreError> {
        Ok(self.inner.index.get_or_create(key, kind)?)
    }

    /// [`Store::resolve`] for many keys at once: one index lock, and the new series written to
    /// the index together (one compressed record for keys that share most of their text).
    pub fn resolve_all(&self, keys: &[(&StreamKey, Kind)]) -> Result<Vec<SeriesId>, StoreError> {
        let refs: Vec<(KeyRef<'_>, Kind)> = keys
            .iter()
            .map(|(key, kind)| (KeyRef::Text(key.canonical_str()), *kind))
            .collect();
        Ok(self.inner.index.resolve(&refs)?)
    }

    /// Writes everything in the head to blocks and advances the WAL checkpoint. Runs in the
    /// background too; writers wait only for the moment the head is swapped.
    pub fn flush(&self) -> Result<flush::FlushReport, StoreError> {
        self.inner.flush()
    }

    /// A consistent view: every batch acknowledged before it is in it, whole, nothing written
    /// after it is; the head stays read-locked while it lives (see `View`).
    pub fn view(&self) -> Result<View<'_>, StoreError> {
        let state = self.inner.state.read().map_err(|_| StoreError::Poisoned)?;
        let head = self.inner.head.read().map_err(|_| StoreError::Poisoned)?;
        let blocks: Arc<Blocks> = state.blocks.clone();
        let frozen: Vec<Arc<Frozen>> = state.frozen.clone();
        drop(state);
        Ok(View::new(head, frozen, blocks, &self.inner.damaged))
    }

    /// Taken before reading, to keep what was read about the past: answers for times before
    /// the mark's `settled_before_ms` stay right until [`Store::past_changed_since`] says
    /// otherwise (`past.rs` says why that is exact).
    pub fn past_mark(&self) -> crate::PastMark {
        self.inner.past.mark()
    }

    /// The earliest sample time that writes reaching back, deletions or retention changed since
    /// `mark` (`i64::MIN`: anywhere); none when nothing did.
    pub fn past_changed_since(&self, mark: &crate::PastMark) -> Option<i64> {
        self.inner.past.earliest_since(mark)
    }

    /// Series ids matching a tag query (the index's snapshot at the time of the call).
    pub fn find(&self, query: &TagQuery, work_max: u64) -> Result<Vec<SeriesId>, StoreError> {
        Ok(self.inner.index.snapshot()?.find(query, work_max)?)
    }

    /// Builds every due rollup (partitions whose end is older than `now_ms` minus the grace,
    /// not built yet or stale because of later data or deletes), finest level first. The
    /// background flusher does this too, a few partitions at a time.
    pub fn build_rollups(&self, now_ms: i64) -> Result<crate::rollup::RollupReport, StoreError> {
        self.inner.build_rollups(now_ms, usize::MAX)
    }

    /// Drops whole partitions past each level's retention as of `now_ms` (raw numeric data
    /// past its shorter retention is rewritten out of base blocks) and deletes their files.
    pub fn apply_retention(
        &self,
        now_ms: i64,
    ) -> Result<crate::rollup::RetentionReport, StoreError> {
        self.inner.apply_retention(now_ms)
    }

    /// Deletes the data of `ids` in `[start_ms, end_ms)` acknowledged before the call: invisible
    /// to every read once this returns (tombstones in the manifest), gone from disk after
    /// `compact`. Flushes the head first. Returns the tombstones added.
    pub fn delete(&self, ids: &[SeriesId], start_ms: i64, end_ms: i64) -> Result<u64, StoreError> {
        self.inner.delete(ids, start_ms, end_ms)
    }

    /// `delete` of every series a tag query matches (a name: `and(__name:cpu)`-style queries).
    pub fn delete_matching(
        &self,
        query: &TagQuery,
        work_max: u64,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<u64, StoreError> {
        let ids = self.find(query, work_max)?;
        self.inner.delete(&ids, start_ms, end_ms)
    }

    /// Rewrites base partitions holding deleted data or several blocks as one block each,
    /// rebuilds rollups still reflecting deleted data (those due as of `now_ms`), and drops the
    /// tombstones nothing needs any more.
    pub fn compact(&self, now_ms: i64) -> Result<crate::compact::CompactReport, StoreError> {
        self.inner.compact(now_ms)
    }

    /// Rewrites, oldest first, up to `partitions_max` base partitions that ended at least
    /// `rollup_grace_ms` before `now_ms` and still hold several blocks, each as one block (the
    /// background maintenance does this; `compact` does it for every partition). Returns the
    /// partitions rewritten.
    pub fn compact_completed(&self, now_ms: i64, partitions_max: usize) -> Result<u64, StoreError> {
        self.inner.compact_completed(now_ms, partitions_max)
    }

    /// Blocks and their sizes, the manifest's checkpoint, what is still in memory.
    pub fn stats(&self) -> Result<flush::StoreStats, StoreError> {
        self.inner.stats()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

fn check_options(opts: &StoreOptions) -> Result<(), StoreError> {
    if opts.base_period_ms < BASE_PERIOD_MS_MIN {
        return Err(StoreError::InvalidOptions("base_period_ms below 1000"));
    }
    if opts.partition_ms <= 0 || opts.partition_ms % opts.base_period_ms != 0 {
        return Err(StoreError::InvalidOptions(
            "partition_ms must be a positive multiple of base_period_ms",
        ));
    }
    if opts.head_samples_max == 0 {
        return Err(StoreError::InvalidOptions("head_samples_max is 0"));
    }
    if opts.levels.len() > crate::manifest::LEVELS_MAX as usize {
        return Err(StoreError::InvalidOptions("more levels than LEVELS_MAX"));
    }
    let mut finer = opts.base_period_ms;
    for l in &opts.levels {
        if l.period_ms <= finer || l.period_ms % finer != 0 {
            return Err(StoreError::InvalidOptions(
                "each level's period must be a larger multiple of the finer level's (or base) period",
            ));
        }
        if l.retention_ms <= 0 {
            return Err(StoreError::InvalidOptions(
                "a level's retention is not positive",
            ));
        }
        finer = l.period_ms;
    }
    if opts.base_retention_ms <= 0 || opts.raw_numeric_retention_ms <= 0 || opts.rollup_grace_ms < 0
    {
        return Err(StoreError::InvalidOptions(
            "retentions must be positive and the rollup grace not negative",
        ));
    }
    Ok(())
}

fn load_or_create_manifest(
    vfs: &dyn Vfs,
    dir: &Path,
    opts: &StoreOptions,
) -> Result<Manifest, StoreError> {
    let layout = crate::rollup::level_layout(opts);
    match Manifest::load(vfs, dir)? {
        Some(mut m) => {
            if m.base_period_ms != opts.base_period_ms || m.partition_ms != opts.partition_ms {
                return Err(StoreError::LayoutMismatch {
                    stored_base_period_ms: m.base_period_ms,
                    stored_partition_ms: m.partition_ms,
                });
            }
            let stored: Vec<(i64, i64)> = m
                .levels
                .iter()
                .map(|l| (l.period_ms, l.partition_ms))
                .collect();
            if stored.is_empty() && !layout.is_empty() {
                // A store from before rollups (or without levels so far): take the options'.
                m.levels = crate::rollup::empty_levels(&layout);
                m.store(vfs, dir).map_err(StoreError::Io)?;
            } else if stored != layout {
                return Err(StoreError::InvalidOptions(
                    "rollup levels differ from the ones the store was created with",
                ));
            }
            Ok(m)
        }
        None => {
            let mut m = Manifest::new(opts.base_period_ms, opts.partition_ms);
            m.levels = crate::rollup::empty_levels(&layout);
            m.store(vfs, dir).map_err(StoreError::Io)?;
            Ok(m)
        }
    }
}

/// A WAL record registered in flight (`Inner::in_flight`) until this is dropped.
struct InFlightRecord<'a> {
    inner: &'a Inner,
    start: u64,
}

impl Drop for InFlightRecord<'_> {
    fn drop(&mut self) {
        if let Ok(mut in_flight) = self.inner.in_flight.lock() {
            in_flight.done(self.start);
        }
    }
}

/// A batch admitted for writing: its origin (if any) is marked as being written until it is
/// marked applied, or (dropped on any other path) freed for a resend to try again.
pub(crate) struct Admitted<'a> {
    inner: &'a Inner,
    origin: Option<&'a Origin>,
}

impl Admitted<'_> {
    /// The batch is in the WAL and the head: its origin counts as applied. Called with the
    /// gate held, so a flush's snapshot of the sources matches the records below its checkpoint.
    fn applied(mut self) {
        if let Some(origin) = self.origin.take() {
            self.inner.finish_origin(origin, true);
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if let Some(origin) = self.origin.take() {
            self.inner.finish_origin(origin, false);
        }
    }
}

impl Inner {
    /// A write names a log position exactly when the store is on an external log.
    fn check_position(&self, position: Option<u64>) -> Result<(), StoreError> {
        match (self.opts.wal, position) {
            (WalBackend::Journal, None) | (WalBackend::External, Some(_)) => Ok(()),
            (WalBackend::Journal, Some(_)) => Err(StoreError::InvalidOptions(
                "write_logged is for a store on an external log",
            )),
            (WalBackend::External, None) => Err(StoreError::InvalidOptions(
                "a store on an external log is written with write_logged (a log position)",
            )),
        }
    }

    /// Decides whether a batch of `origin` is to be written: `None` for a duplicate (applied
    /// before); waits while another request writes the same batch.
    fn admit<'a>(&'a self, origin: Option<&'a Origin>) -> Result<Option<Admitted<'a>>, StoreError> {
        let Some(o) = origin else {
            return Ok(Some(Admitted {
                inner: self,
                origin: None,
            }));
        };
        let deadline = Instant::now() + Duration::from_millis(SAME_BATCH_WAIT_MS_MAX);
        let mut sources = self.sources.lock().map_err(|_| StoreError::Poisoned)?;
        loop {
            match sources.admit(o) {
                Admission::Proceed => {
                    return Ok(Some(Admitted {
                        inner: self,
                        origin: Some(o),
                    }))
                }
                Admission::Duplicate => return Ok(None),
                Admission::StaleEpoch { newest } => {
                    return Err(StoreError::StaleEpoch {
                        source: o.source.to_string(),
                        epoch: o.epoch,
                        newest,
                    })
                }
                Admission::TooManySources => {
                    return Err(StoreError::TooManySources {
                        max: crate::sources::SOURCES_MAX,
                    })
                }
                Admission::Wait => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(StoreError::SameBatchBusy {
                            source: o.source.to_string(),
                            seq: o.seq,
                        });
                    }
                    sources = self
                        .sources_changed
                        .wait_timeout(sources, left)
                        .map_err(|_| StoreError::Poisoned)?
                        .0;
                }
            }
        }
    }

    fn finish_origin(&self, origin: &Origin, applied: bool) {
        if let Ok(mut sources) = self.sources.lock() {
            sources.finish(origin, applied);
        }
        self.sources_changed.notify_all();
    }

    /// Writes the batch's samples whose entry resolved to an id (`REJECTED` ones are left out).
    fn write_resolved(
        &self,
        batch: &WriteBatch,
        ids: &[SeriesId],
        admitted: Admitted<'_>,
        position: Option<u64>,
    ) -> Result<(), StoreError> {
        assert_eq!(ids.len(), batch.entry_keys().len());
        // Held until the batch is in the head (see `gate`) and its origin marked applied.
        let _gate = self.gate.read().map_err(|_| StoreError::Poisoned)?;
        let writes_anything = ids.iter().any(|id| *id != wal::REJECTED);
        if batch.is_empty() || !writes_anything {
            // Nothing to make durable: resending it has no effect either.
            admitted.applied();
            return Ok(());
        }
        let samples = admitted_samples(batch.batch_samples(), ids);
        if batch.has_cumulative() {
            self.submit_and_apply_cumulative(batch, &samples, ids, position)?;
        } else {
            let (ticket, in_flight) = self.submit_record(batch, &samples, ids, position)?;
            let range = ticket.range();
            ticket.wait()?;
            self.apply_batch(range.start, range.end, batch, &samples, ids)?;
            drop(in_flight);
        }
        admitted.applied();
        Ok(())
    }

    /// Submits the batch's WAL record, encoded straight from the batch into the journal's
    /// buffer: building WAL groups first would copy every value (histograms included) once
    /// more, and a record of our own once more again.
    /// The record stays registered in flight until the returned guard is dropped (after it is
    /// applied, or on failure).
    fn submit_record(
        &self,
        batch: &WriteBatch,
        samples: &[BatchSample],
        ids: &[SeriesId],
        position: Option<u64>,
    ) -> Result<(LogTicket, InFlightRecord<'_>), StoreError> {
        // The batch's hint is for all its samples; a cut-down batch reserves its share.
        let size_hint_bytes = batch.record_size_hint_bytes().saturating_mul(samples.len())
            / batch.sample_count().max(1);
        // Registered under the lock the submit runs in, so records enter in offset order.
        let mut in_flight = self.in_flight.lock().map_err(|_| StoreError::Poisoned)?;
        let ticket = self
            .log
            .submit(16 + size_hint_bytes, position, &mut |out| {
                wal::encode_batch(batch.origin(), samples, batch.values(), ids, out)
            })?;
        let start = ticket.range().start;
        in_flight.add(start);
        Ok((ticket, InFlightRecord { inner: self, start }))
    }

    /// The offset below which every record is applied, for a writer about to apply its own.
    fn settled(&self) -> Result<u64, StoreError> {
        Ok(self
            .in_flight
            .lock()
            .map_err(|_| StoreError::Poisoned)?
            .settled())
    }

    /// Appends a batch with cumulative histograms to the WAL, waits until it is durable, and
    /// applies it to the head (the caller holds the gate).
    fn submit_and_apply_cumulative(
        &self,
        batch: &WriteBatch,
        samples: &[BatchSample],
        ids: &[SeriesId],
        position: Option<u64>,
    ) -> Result<(), StoreError> {
        // Differences need owned groups, made in WAL order under the state lock.
        let groups = wal::batch_groups(samples, batch.values(), ids);
        let mut state = self.cumulative.lock().map_err(|_| StoreError::Poisoned)?;
        let (ticket, in_flight) = self.submit_record(batch, samples, ids, position)?;
        let groups = differences(&mut state, groups);
        drop(state);
        // The journal offset orders duplicates in the head exactly as replay will.
        let range = ticket.range();
        // If this fails the record may or may not be in the WAL (the journal is then poisoned
        // and refuses further appends); the cumulative state already counts it, as replay
        // would if the record survived. Nothing is acknowledged either way.
        ticket.wait()?;
        self.apply(range.start, range.end, groups)?;
        drop(in_flight);
        Ok(())
    }

    /// The series id of each of the batch's entries (by slot), durable in the index.
    fn resolve(&self, batch: &WriteBatch) -> Result<Vec<SeriesId>, StoreError> {
        let keys: Vec<_> = batch.entry_keys().collect();
        let ids = self.index.resolve(&keys)?;
        assert_eq!(ids.len(), keys.len());
        self.make_series_durable(ids.iter().map(|id| id.0).max().unwrap_or(0))?;
        Ok(ids)
    }

    /// As [`Inner::resolve`], with `REJECTED` for entries whose key has another kind.
    fn resolve_partial(
        &self,
        batch: &WriteBatch,
    ) -> Result<(Vec<SeriesId>, Vec<KindRejection>), StoreError> {
        let keys: Vec<_> = batch.entry_keys().collect();
        let resolved = self.index.resolve_partial(&keys)?;
        let resolved = resolved
            .into_iter()
            .map(|r| match r {
                Ok(id) => Resolved::Id(id),
                Err((id, kind)) => Resolved::OtherKind(id, kind),
            })
            .collect();
        let out = self.settle(batch, &keys, resolved)?;
        debug_assert!(out.refused.is_empty());
        Ok((out.ids, out.kind_rejections))
    }

    /// As [`Inner::resolve_partial`], with `REJECTED` for new keys a cardinality limit refused
    /// too.
    fn resolve_limited(
        &self,
        batch: &WriteBatch,
        source: &str,
        now_ms: i64,
    ) -> Result<Settled, StoreError> {
        let keys: Vec<_> = batch.entry_keys().collect();
        let resolved = self.index.resolve_limited(&keys, source, now_ms)?;
        self.settle(batch, &keys, resolved)
    }

    /// The ids to write (`REJECTED` for entries left out), the rejections and refusals with
    /// their sample counts; new series made durable.
    fn settle(
        &self,
        batch: &WriteBatch,
        keys: &[(KeyRef<'_>, Kind)],
        resolved: Vec<Resolved>,
    ) -> Result<Settled, StoreError> {
        let mut out = Settled {
            ids: Vec::with_capacity(keys.len()),
            kind_rejections: Vec::new(),
            refused: Vec::new(),
        };
        // Entry slots left out, in slot order, to count their samples once.
        let mut left_out = Vec::new();
        let limits = self.index.limits()?.unwrap_or_default();
        for (slot, r) in resolved.into_iter().enumerate() {
            let key_text = || -> Result<String, StoreError> {
                Ok(match keys[slot].0 {
                    KeyRef::Text(text) => text.to_owned(),
                    KeyRef::Id(id) => self.index.key_text(id)?.unwrap_or_default(),
                })
            };
            match r {
                Resolved::Id(id) => out.ids.push(id),
                Resolved::OtherKind(_, existing) => {
                    out.ids.push(wal::REJECTED);
                    left_out.push((slot, true, out.kind_rejections.len()));
                    out.kind_rejections.push(KindRejection {
                        key: key_text()?,
                        existing,
                        requested: keys[slot].1,
                        samples: 0,
                    });
                }
                Resolved::Refused(limit) => {
                    out.ids.push(wal::REJECTED);
                    left_out.push((slot, false, out.refused.len()));
                    out.refused.push(CardinalityRefusal {
                        key: key_text()?,
                        limit,
                        max: limit.max(&limits),
                        samples: 0,
                    });
                }
            }
        }
        if !left_out.is_empty() {
            let mut per_entry = vec![0usize; out.ids.len()];
            for s in batch.batch_samples() {
                per_entry[s.entry as usize] += 1;
            }
            for (slot, kind, at) in left_out {
                if kind {
                    out.kind_rejections[at].samples = per_entry[slot];
                } else {
                    out.refused[at].samples = per_entry[slot];
                }
            }
        }
        let id_max = out
            .ids
            .iter()
            .filter(|&&id| id != wal::REJECTED)
            .map(|id| id.0)
            .max();
        self.make_series_durable(id_max.unwrap_or(0))?;
        Ok(out)
    }

    /// Ensures series `0..=id_max` are fsynced in the index before a WAL record names them
    /// (another writer may have created one of them and not synced it yet).
    fn make_series_durable(&self, id_max: u32) -> Result<(), StoreError> {
        if id_max < self.series_durable_count.load(Ordering::Acquire) {
            return Ok(());
        }
        let _guard = self.sync_lock.lock().map_err(|_| StoreError::Poisoned)?;
        if id_max < self.series_durable_count.load(Ordering::Acquire) {
            return Ok(());
        }
        // Counted before the sync: every series below the count is already in the file.
        let count = self.index.snapshot()?.series_count();
        assert!(id_max < count, "series id {id_max} not in the index");
        self.index.sync()?;
        self.series_durable_count.store(count, Ordering::Release);
        Ok(())
    }

    fn apply(&self, seq: u64, end: u64, groups: Vec<Group>) -> Result<(), StoreError> {
        let activity: Vec<(SeriesId, i64)> = groups.iter().flat_map(activity_of).collect();
        let at = Offsets {
            seq,
            settled: self.settled()?,
        };
        {
            let mut head = self.head.write().map_err(|_| StoreError::Poisoned)?;
            for group in groups {
                for (ts_ms, value) in group.samples {
                    let applied = head.insert(group.id, at, ts_ms, value);
                    assert!(applied, "series {:?} got a value of another kind", group.id);
                }
            }
            self.applied_end.fetch_max(end, Ordering::AcqRel);
        }
        self.applied(&activity)
    }

    /// [`Inner::apply`] for a batch without cumulative values, from its admitted `samples`, in
    /// the order they were added (the order replay applies them in); histograms' bins from
    /// the batch's packed bytes (every plain histogram of a batch is packed when added).
    fn apply_batch(
        &self,
        seq: u64,
        end: u64,
        batch: &WriteBatch,
        samples: &[BatchSample],
        ids: &[SeriesId],
    ) -> Result<(), StoreError> {
        let values = batch.values();
        // What a plain histogram's sample passes to the head beside its packed bins.
        let plain_histogram = Value::Histogram(hist::Histogram::new());
        // Sized once (two entries per run at most): grown by doubling it took fresh pages
        // from the kernel on every write.
        let mut activity: Vec<(SeriesId, i64)> = Vec::with_capacity(2 * samples.len());
        let at = Offsets {
            seq,
            settled: self.settled()?,
        };
        {
            let mut head = self.head.write().map_err(|_| StoreError::Poisoned)?;
            for run in samples.chunk_by(|a, b| a.entry == b.entry) {
                let id = ids[run[0].entry as usize];
                if id == wal::REJECTED {
                    continue;
                }
                let (mut first, mut last) = (i64::MAX, i64::MIN);
                for s in run {
                    let numeric: Value;
                    let (value, bins) = match s.value {
                        SampleValue::Numeric(v) => {
                            numeric = Value::Numeric(v);
                            (&numeric, &[][..])
                        }
                        SampleValue::Packed(p) => (&plain_histogram, values.bins(p)),
                        SampleValue::Other(i) => {
                            let other = &values.others[i as usize];
                            assert!(
                                !matches!(other, Value::Histogram(_)),
                                "a batch packs its plain histograms"
                            );
                            (other, &[][..])
                        }
                    };
                    let applied = head.insert_encoded(id, at, s.ts_ms, value, bins);
                    assert!(applied, "series {id:?} got a value of another kind");
                    first = first.min(s.ts_ms);
                    last = last.max(s.ts_ms);
                }
                // A run of one sample (one per series per step) is one entry, not two: the
                // list is walked again by the index, and at two it outgrew the L2 cache.
                activity.push((id, first));
                if last != first {
                    activity.push((id, last));
                }
            }
            self.applied_end.fetch_max(end, Ordering::AcqRel);
        }
        self.applied(&activity)
    }

    /// What follows a batch entering the head: the flush timer, the series' activity, and a
    /// change of the past when it reached back (after the head took it: see `past.rs`).
    fn applied(&self, activity: &[(SeriesId, i64)]) -> Result<(), StoreError> {
        if let Ok(mut since) = self.head_since.lock() {
            since.get_or_insert_with(Instant::now);
        }
        if let Some(earliest_ms) = activity.iter().map(|a| a.1).min() {
            // A histogram is kept at its base period's start, before its own time.
            self.past
                .wrote(earliest_ms.saturating_sub(self.opts.base_period_ms));
        }
        self.index.note_activity(activity)?;
        Ok(())
    }

    /// Activity ranges of what the blocks hold (the index file does not keep them).
    fn note_block_activity(&self) -> Result<(), StoreError> {
        let state = self.state.read().map_err(|_| StoreError::Poisoned)?;
        let mut activity = Vec::new();
        for block in state.blocks.all() {
            for e in block.entries() {
                activity.push((e.series, e.first_ts_ms));
                activity.push((e.series, e.last_ts_ms));
            }
            if activity.len() >= 1 << 16 {
                self.index.note_activity(&activity)?;
                activity.clear();
            }
        }
        self.index.note_activity(&activity)?;
        Ok(())
    }

    /// Replays the WAL records from the manifest's checkpoint into the head, in offset order
    /// (an external log replays nothing here: its owner replays it from the checkpoint).
    fn replay_wal(&self) -> Result<ReplayReport, StoreError> {
        let checkpoint = self
            .state
            .read()
            .map_err(|_| StoreError::Poisoned)?
            .manifest
            .checkpoint;
        let mut report = ReplayReport {
            from_offset: checkpoint,
            ..ReplayReport::default()
        };
        let mut state = self.cumulative.lock().map_err(|_| StoreError::Poisoned)?;
        let mut sources = self.sources.lock().map_err(|_| StoreError::Poisoned)?;
        let mut head = self.head.write().map_err(|_| StoreError::Poisoned)?;
        let mut activity = Vec::new();
        let end = self.log.replay(checkpoint, &mut |offset, payload| {
            let record = wal::decode(payload).map_err(|e| StoreError::WalCorrupt {
                journal_offset: offset,
                byte: e.offset,
                what: e.what,
            })?;
            if let Some(origin) = &record.origin {
                sources.record(origin);
            }
            for group in differences(&mut state, record.groups) {
                let kind = group.samples[0].1.kind();
                if self.index.kind_of(group.id)? != Some(kind) {
                    return Err(StoreError::WalUnknownSeries {
                        journal_offset: offset,
                        id: group.id.0,
                    });
                }
                activity.extend(activity_of(&group));
                for (ts_ms, value) in group.samples {
                    report.samples += 1;
                    if !head.insert(group.id, Offsets::in_order(offset), ts_ms, value) {
                        return Err(StoreError::WalUnknownSeries {
                            journal_offset: offset,
                            id: group.id.0,
                        });
                    }
                }
            }
            report.records += 1;
            Ok(())
        })?;
        self.applied_end.store(end, Ordering::Release);
        if report.samples > 0 {
            if let Ok(mut since) = self.head_since.lock() {
                *since = Some(Instant::now());
            }
        }
        drop(head);
        drop(sources);
        drop(state);
        report.blocks = self
            .state
            .read()
            .map_err(|_| StoreError::Poisoned)?
            .blocks
            .all()
            .count() as u64;
        self.index.note_activity(&activity)?;
        Ok(report)
    }

    /// The background flusher: flushes when the head is big or old enough.
    fn flush_loop(&self) {
        let (lock, cv) = &self.stop;
        let mut last_maintenance = Instant::now();
        loop {
            let Ok(stopped) = lock.lock() else { return };
            let Ok((stopped, _)) = cv.wait_timeout(stopped, Duration::from_millis(FLUSH_TICK_MS))
            else {
                return;
            };
            if *stopped {
                return;
            }
            drop(stopped);
            let mut flushed = false;
            if self.flush_due() {
                let result = self.flush();
                let failed = result.is_err();
                self.flush_failing.store(failed, Ordering::Release);
                self.note_background(failed, result.err(), true);
                flushed = !failed;
            }
            // Right after a flush too (its blocks make the finest level's partition still
            // filling stale, and until it is rebuilt reads of the last hours merge base periods),
            // but not more often than every MAINTENANCE_AFTER_FLUSH_GAP_MS: under heavy ingest
            // the head fills and flushes every few seconds.
            let since = last_maintenance.elapsed();
            let maintenance_due = since >= Duration::from_millis(MAINTENANCE_TICK_MS)
                || (flushed && since >= Duration::from_millis(MAINTENANCE_AFTER_FLUSH_GAP_MS));
            if self.opts.background_maintenance && maintenance_due {
                last_maintenance = Instant::now();
                let now_ms = crate::rollup::wall_clock_ms();
                // Failures are retried next tick; nothing is lost by a failed pass.
                let pass = self
                    .build_rollups(now_ms, BACKGROUND_ROLLUP_PARTITIONS_MAX)
                    .map(drop)
                    .and_then(|()| self.apply_retention(now_ms).map(drop))
                    .and_then(|()| {
                        self.compact_completed(now_ms, BACKGROUND_COMPACT_PARTITIONS_MAX)
                            .map(drop)
                    });
                if let Err(e) = pass {
                    self.note_background(true, Some(e), false);
                }
            }
        }
    }

    /// Counts a background failure (`failed`) of a flush (`flush`) or a maintenance pass.
    fn note_background(&self, failed: bool, error: Option<StoreError>, flush: bool) {
        let Ok(mut f) = self.background_failures.lock() else {
            return;
        };
        if flush {
            f.flush_failing = failed;
        }
        if !failed {
            return;
        }
        if flush {
            f.flush_failures_total += 1;
        } else {
            f.maintenance_failures_total += 1;
        }
        f.last_error = error.map(|e| e.to_string());
    }

    fn flush_due(&self) -> bool {
        let samples = self.head.read().map(|h| h.samples).unwrap_or(0);
        if samples >= self.opts.head_samples_max {
            return true;
        }
        let pending = self
            .state
            .read()
            .map(|s| !s.frozen.is_empty())
            .unwrap_or(false);
        let old = self
            .head_since
            .lock()
            .ok()
            .and_then(|s| *s)
            .is_some_and(|since| {
                since.elapsed() >= Duration::from_millis(self.opts.flush_interval_ms)
            });
        pending || (samples > 0 && old)
    }
}

/// "Now" for the cardinality limits: the wall clock for a write to the store's own journal; for
/// a batch of an external log (`position`), a time from the batch alone — its receipt time, or
/// its newest sample without an origin — so that every store applying the log decides alike.
fn limits_now_ms(batch: &WriteBatch, position: Option<u64>) -> i64 {
    if position.is_none() {
        return crate::cardinality::wall_ms();
    }
    match batch.origin() {
        Some(origin) => origin.received_ms,
        None => batch
            .batch_samples()
            .iter()
            .map(|s| s.ts_ms)
            .max()
            .unwrap_or(0),
    }
}

/// The samples of the entries that resolved to a series, in batch order: what a batch with
/// refused entries writes. Cut down once, before any shared lock, so that the WAL record's
/// encoding (under the journal's lock) and the head's inserts (under its write lock) cost what
/// is written, not what was sent: a body of 10^6 refused new series held every other writer
/// behind two passes over its million samples. Two runs of one series that a refused run
/// separated become one WAL group; replay applies them in the same order.
fn admitted_samples<'a>(samples: &'a [BatchSample], ids: &[SeriesId]) -> Cow<'a, [BatchSample]> {
    if !ids.contains(&wal::REJECTED) {
        return Cow::Borrowed(samples);
    }
    let admitted: Vec<BatchSample> = samples
        .iter()
        .filter(|s| ids[s.entry as usize] != wal::REJECTED)
        .copied()
        .collect();
    Cow::Owned(admitted)
}

/// Cumulative histograms become differences from the series' newest cumulative submission
/// (`CumulativeState::difference`); one older than that adds nothing and is left out, as
/// replay leaves it out, and a group left with no sample is dropped.
fn differences(state: &mut CumulativeState, mut groups: Vec<Group>) -> Vec<Group> {
    for group in &mut groups {
        let id = group.id;
        group.samples.retain_mut(|(ts_ms, value)| match value {
            Value::CumulativeHistogram(cumulative) => {
                match state.difference(id, *ts_ms, cumulative) {
                    Some(delta) => {
                        *value = Value::Histogram(delta);
                        true
                    }
                    None => false,
                }
            }
            _ => true,
        });
    }
    groups.retain(|g| !g.samples.is_empty());
    groups
}

fn activity_of(group: &Group) -> [(SeriesId, i64); 2] {
    series_activity(group.id, &group.samples)
}

fn series_activity(id: SeriesId, samples: &[(i64, Value)]) -> [(SeriesId, i64); 2] {
    let ts = samples.iter().map(|(ts_ms, _)| *ts_ms);
    let first = ts.clone().min().unwrap_or(i64::MAX);
    let last = ts.max().unwrap_or(i64::MIN);
    [(id, first), (id, last)]
}
