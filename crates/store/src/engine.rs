//! The engine's shared state and its options: what `Store` owns and the write path, flush,
//! rollups and compaction (each an `impl Inner` in its own module) work on. Below all of them.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Instant;

use journal::vfs::{RealFs, Vfs};
use journal::Durability;

use crate::block::BlockId;
use crate::blockset::State;
use crate::cardinality::CardinalityOptions;
use crate::head::{CumulativeState, Head};
use crate::index::SeriesIndex;
use crate::log::{WalBackend, WriteAheadLog};
use crate::series::SeriesId;
use crate::sources::Sources;

/// Smallest and default base period: histograms are merged per base period.
pub const BASE_PERIOD_MS_MIN: i64 = 1_000;
pub const BASE_PERIOD_MS_DEFAULT: i64 = 60_000;
/// Default time partition of a block: two hours.
pub const PARTITION_MS_DEFAULT: i64 = 2 * 3600 * 1000;
pub const MINUTE_MS: i64 = 60_000;
pub const HOUR_MS: i64 = 60 * MINUTE_MS;
pub const DAY_MS: i64 = 24 * HOUR_MS;

/// One rollup level: slices of `period_ms`, kept for `retention_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelOptions {
    pub period_ms: i64,
    pub retention_ms: i64,
}

/// The default levels: 5 m kept 1 year, 1 h and 1 d kept 5 years.
pub fn default_levels() -> Vec<LevelOptions> {
    vec![
        LevelOptions {
            period_ms: 5 * MINUTE_MS,
            retention_ms: 365 * DAY_MS,
        },
        LevelOptions {
            period_ms: HOUR_MS,
            retention_ms: 5 * 365 * DAY_MS,
        },
        LevelOptions {
            period_ms: DAY_MS,
            retention_ms: 5 * 365 * DAY_MS,
        },
    ]
}

#[derive(Clone)]
pub struct StoreOptions {
    /// Histograms are merged per period of this length; ≥ `BASE_PERIOD_MS_MIN`. Fixed when the
    /// store is created (kept in the manifest).
    pub base_period_ms: i64,
    /// Time partition of a block; a multiple of the base period. Fixed at creation too.
    pub partition_ms: i64,
    /// The write-ahead log: the store's own journal (default) or the caller's log
    /// (`FORMAT.md`, "Write-ahead log back-ends").
    pub wal: WalBackend,
    /// When `write` returns (the journal's modes; group commit by default).
    pub durability: Durability,
    /// Size of each preallocated WAL segment file.
    pub wal_segment_size_bytes: u64,
    /// The file layer of the WAL, blocks and manifest: `RealFs` unless a test injects faults
    /// (the series index uses `std::fs`).
    pub vfs: Arc<dyn Vfs>,
    /// The background flusher writes the head to blocks once its oldest sample was written
    /// `flush_interval_ms` ago (flushes are sized by time: a block then holds a partition's
    /// worth of each series, its chunks long)…
    pub flush_interval_ms: u64,
    /// …or, as a backstop for memory, once it holds this many samples (numeric points take
    /// about a byte each in the head, `STATUS.md` has the budget).
    pub head_samples_max: u64,
    /// Run the background flusher (tests that drive `flush` themselves turn it off).
    pub background_flush: bool,
    /// Rollup levels, finest first: each period a multiple of the one before (the first of the
    /// base period). Fixed at creation (kept in the manifest); retentions may change.
    pub levels: Vec<LevelOptions>,
    /// Base blocks (histograms at the base period, text) are dropped after this long.
    pub base_retention_ms: i64,
    /// Raw numeric samples are dropped after this long (their rollups stay).
    pub raw_numeric_retention_ms: i64,
    /// A rollup partition is built once its end is this much older than now.
    pub rollup_grace_ms: i64,
    /// The background flusher also builds rollups and applies retention (wall clock), every
    /// `MAINTENANCE_TICK_MS`.
    pub background_maintenance: bool,
    /// New and active series limits for `Store::write_limited` (none by default).
    pub cardinality: CardinalityOptions,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            base_period_ms: BASE_PERIOD_MS_DEFAULT,
            partition_ms: PARTITION_MS_DEFAULT,
            wal: WalBackend::Journal,
            durability: Durability::default(),
            wal_segment_size_bytes: 64 << 20,
            vfs: Arc::new(RealFs),
            flush_interval_ms: PARTITION_MS_DEFAULT as u64,
            head_samples_max: 1 << 30,
            background_flush: true,
            levels: default_levels(),
            base_retention_ms: 30 * DAY_MS,
            raw_numeric_retention_ms: 7 * DAY_MS,
            rollup_grace_ms: 30 * MINUTE_MS,
            background_maintenance: true,
            cardinality: CardinalityOptions::UNLIMITED,
        }
    }
}

/// What recovery did on open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    pub records: u64,
    pub samples: u64,
    /// The WAL offset replay started from (the manifest's checkpoint).
    pub from_offset: u64,
    pub blocks: u64,
    /// Blocks found damaged on open and moved to `quarantine/`, with why.
    pub quarantined: Vec<(String, String)>,
}

/// The store's shared state; `Store` owns it with the background flusher.
pub(crate) struct Inner {
    pub dir: PathBuf,
    pub opts: StoreOptions,
    pub log: Box<dyn WriteAheadLog>,
    pub index: SeriesIndex,
    /// Writers hold it shared from submitting a record until it is in the head; a flush takes
    /// it exclusively to freeze the head at a point where every record below the checkpoint
    /// is in it. Lock order: gate, then `state`, then `head`.
    pub gate: RwLock<()>,
    pub state: RwLock<State>,
    pub head: RwLock<Head>,
    /// Held from computing cumulative differences until the record is submitted, so the
    /// differences follow WAL order (which replay reproduces).
    pub cumulative: Mutex<CumulativeState>,
    /// Which batches each sender had applied (exactly-once effect); writers of a batch whose
    /// origin another request is writing wait on `sources_changed`.
    pub sources: Mutex<Sources>,
    pub sources_changed: Condvar,
    /// End offset of the newest record applied to the head.
    pub applied_end: AtomicU64,
    /// WAL records submitted and not yet applied to the head: what says which numeric points
    /// the head may compress (`Head::insert`'s `settled`). A leaf lock: nothing is locked while
    /// it is held but the journal's own state (a submit registers under it).
    pub in_flight: Mutex<InFlight>,
    /// When the oldest sample now in the head was applied (for the flush interval).
    pub head_since: Mutex<Option<Instant>>,
    /// Series ids below this are durable in the index file.
    pub series_durable_count: AtomicU32,
    pub sync_lock: Mutex<()>,
    pub flush_lock: Mutex<()>,
    /// Chunks found damaged by reads: (block, series), never read again.
    pub damaged: Mutex<HashSet<(BlockId, SeriesId)>>,
    /// Base partitions whose background rewrite failed (a damaged chunk in them): not retried
    /// by the background pass in this process (`Store::compact` still tries, and reports).
    pub compact_failed: Mutex<HashSet<i64>>,
    pub replay: ReplayReport,
    pub stop: (Mutex<bool>, Condvar),
    /// The last background flush failed (it is retried every tick).
    pub flush_failing: AtomicBool,
    /// Background flushes and maintenance passes that failed, and the last failure's text.
    pub background_failures: Mutex<BackgroundFailures>,
    /// Writes that reached back into the past, deletions and retention drops (`past.rs`).
    pub past: crate::past::PastChanges,
}

/// What failed in the background (the store does not log; its owner reads this).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackgroundFailures {
    /// The last background flush failed (and the head keeps growing until one succeeds).
    pub flush_failing: bool,
    pub flush_failures_total: u64,
    pub maintenance_failures_total: u64,
    /// The last failure, as its error says it.
    pub last_error: Option<String>,
}

/// The WAL records submitted and not yet applied to the head, by start offset (ascending:
/// each is registered as it is submitted, under the same lock). Writers remove theirs once
/// applied, or on failure; at most one per writer thread is ever here.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    starts: VecDeque<(u64, bool)>,
}

impl InFlight {
    pub fn add(&mut self, start: u64) {
        assert!(
            self.starts.back().is_none_or(|&(s, _)| s < start),
            "records are registered in offset order"
        );
        self.starts.push_back((start, false));
    }

    pub fn done(&mut self, start: u64) {
        if let Some(entry) = self.starts.iter_mut().find(|(s, _)| *s == start) {
            entry.1 = true;
        }
        while self.starts.front().is_some_and(|&(_, done)| done) {
            self.starts.pop_front();
        }
    }

    /// Every record below this offset is applied (`u64::MAX`: every record submitted so far).
    /// Any earlier answer stays true, so a writer may use one read before it took the head.
    pub fn settled(&self) -> u64 {
        self.starts.front().map_or(u64::MAX, |&(s, _)| s)
    }
}
