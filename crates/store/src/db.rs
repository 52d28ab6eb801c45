//! `Store`: the write path (WAL on the journal, series resolution), the head and its recovery.
//!
//! A write resolves each distinct key of the batch to a series id (creating it in the index),
//! makes new series durable (index fsync) before anything refers to them, appends the batch as
//! one journal record, waits until the journal says the record is durable at the configured
//! level, and only then applies it to the head. Concurrent writers share the journal's group
//! commit: each waits for its own ticket, one fsync covers them all.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use journal::vfs::{RealFs, Vfs};
use journal::{Durability, Journal, Start};

use crate::batch::{SeriesSamples, Value, WriteBatch};
use crate::head::{CumulativeState, Head};
use crate::index::{SeriesId, SeriesIndex};
use crate::read::View;
use crate::tagquery::TagQuery;
use crate::wal::{self, Group};
use crate::StoreError;

/// Smallest and default base period: histograms are merged per base period.
pub const BASE_PERIOD_MS_MIN: i64 = 1_000;
pub const BASE_PERIOD_MS_DEFAULT: i64 = 60_000;
/// The journal subscriber that marks what the head has consumed. Blocks do not exist yet, so
/// its checkpoint stays at the beginning: it pins the whole WAL against purging, and recovery
/// replays everything.
pub const HEAD_SUBSCRIBER: &str = "head";

#[derive(Clone)]
pub struct StoreOptions {
    /// Histograms are merged per period of this length; ≥ `BASE_PERIOD_MS_MIN`.
    pub base_period_ms: i64,
    /// When `write` returns (the journal's modes; group commit by default).
    pub durability: Durability,
    /// Size of each preallocated WAL segment file.
    pub wal_segment_size_bytes: u64,
    /// The WAL's file layer: `RealFs` unless a test injects faults (the index uses `std::fs`).
    pub wal_vfs: Arc<dyn Vfs>,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            base_period_ms: BASE_PERIOD_MS_DEFAULT,
            durability: Durability::default(),
            wal_segment_size_bytes: 64 << 20,
            wal_vfs: Arc::new(RealFs),
        }
    }
}

/// What recovery did on open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    pub records: u64,
    pub samples: u64,
}

pub struct Store {
    dir: PathBuf,
    journal: Journal,
    index: SeriesIndex,
    head: RwLock<Head>,
    /// Held from computing cumulative differences until the record is submitted, so the
    /// differences follow WAL order (which replay reproduces).
    cumulative: Mutex<CumulativeState>,
    /// Series ids below this are durable in the index file.
    series_durable_count: AtomicU32,
    sync_lock: Mutex<()>,
    replay: ReplayReport,
}

impl Store {
    /// Opens or creates a store in `dir` (`dir/wal` the journal, `dir/index` the series index)
    /// and replays the WAL into the head.
    pub fn open(dir: impl AsRef<Path>, opts: StoreOptions) -> Result<Store, StoreError> {
        if opts.base_period_ms < BASE_PERIOD_MS_MIN {
            return Err(StoreError::InvalidOptions("base_period_ms below 1000"));
        }
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(StoreError::Io)?;
        let journal = Journal::open(
            dir.join("wal"),
            journal::Options {
                durability: opts.durability,
                segment_size_bytes: opts.wal_segment_size_bytes,
                vfs: opts.wal_vfs.clone(),
                ..journal::Options::default()
            },
        )?;
        let index = SeriesIndex::open(&dir.join("index"))?;
        let series_count = index.snapshot()?.series_count();
        if !journal
            .subscribers()?
            .iter()
            .any(|s| s.name == HEAD_SUBSCRIBER)
        {
            journal.add_subscriber(HEAD_SUBSCRIBER, Start::Begin)?;
        }
        let mut store = Store {
            dir,
            journal,
            index,
            head: RwLock::new(Head::new(opts.base_period_ms)),
            cumulative: Mutex::new(CumulativeState::default()),
            series_durable_count: AtomicU32::new(series_count),
            sync_lock: Mutex::new(()),
            replay: ReplayReport::default(),
        };
        store.replay = store.replay_wal()?;
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn replay_report(&self) -> ReplayReport {
        self.replay
    }

    pub fn index(&self) -> &SeriesIndex {
        &self.index
    }

    /// Syncs the WAL and the index and stops the journal's flusher.
    pub fn close(self) -> Result<(), StoreError> {
        self.index.sync()?;
        self.journal.close()?;
        Ok(())
    }

    /// Writes a batch; returns once it is durable at the configured level and visible to reads.
    pub fn write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let groups = self.resolve(batch)?;
        let mut record = Vec::new();
        wal::encode(&groups, &mut record);
        let has_cumulative = groups
            .iter()
            .any(|g| matches!(g.samples[0].1, Value::CumulativeHistogram(_)));
        let (ticket, groups) = if has_cumulative {
            let mut state = self.cumulative.lock().map_err(|_| StoreError::Poisoned)?;
            let ticket = self.journal.submit(&[&record])?;
            (ticket, differences(&mut state, groups))
        } else {
            (self.journal.submit(&[&record])?, groups)
        };
        // The journal offset orders duplicates in the head exactly as replay will.
        let seq = ticket.range().start;
        // If this fails the record may or may not be in the WAL (the journal is then poisoned
        // and refuses further appends); the cumulative state already counts it, as replay would
        // if the record survived. Nothing is acknowledged either way.
        ticket.wait()?;
        self.apply(seq, groups)
    }

    /// Series ids for the batch's keys, samples split into groups of one value tag.
    fn resolve(&self, batch: &WriteBatch) -> Result<Vec<Group>, StoreError> {
        let mut groups = Vec::with_capacity(batch.series().len());
        let mut id_max = 0u32;
        for series in batch.series() {
            let id = self.index.get_or_create(&series.key, series.kind)?;
            id_max = id_max.max(id.0);
            push_groups(&mut groups, id, series);
        }
        self.make_series_durable(id_max)?;
        Ok(groups)
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

    fn apply(&self, seq: u64, groups: Vec<Group>) -> Result<(), StoreError> {
        let activity: Vec<(SeriesId, i64)> = groups.iter().flat_map(activity_of).collect();
        {
            let mut head = self.head.write().map_err(|_| StoreError::Poisoned)?;
            for group in groups {
                for (ts_ms, value) in group.samples {
                    let applied = head.insert(group.id, seq, ts_ms, value);
                    assert!(applied, "series {:?} got a value of another kind", group.id);
                }
            }
        }
        self.index.note_activity(&activity)?;
        Ok(())
    }

    /// Replays every WAL record into the head, in offset order.
    fn replay_wal(&self) -> Result<ReplayReport, StoreError> {
        let mut report = ReplayReport::default();
        let mut reader = self.journal.reader(self.journal.earliest_offset()?)?;
        let mut batch = journal::Batch::new();
        let mut state = self.cumulative.lock().map_err(|_| StoreError::Poisoned)?;
        let mut head = self.head.write().map_err(|_| StoreError::Poisoned)?;
        let mut activity = Vec::new();
        while reader.next_batch(&mut batch)? > 0 {
            for (offset, payload) in batch.iter() {
                let groups = wal::decode(payload).map_err(|e| StoreError::WalCorrupt {
                    journal_offset: offset,
                    byte: e.offset,
                    what: e.what,
                })?;
                for group in differences(&mut state, groups) {
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
                        if !head.insert(group.id, offset, ts_ms, value) {
                            return Err(StoreError::WalUnknownSeries {
                                journal_offset: offset,
                                id: group.id.0,
                            });
                        }
                    }
                }
                report.records += 1;
            }
        }
        drop(head);
        self.index.note_activity(&activity)?;
        Ok(report)
    }

    /// A consistent view of the head: nothing written while it is held becomes visible in it,
    /// and every batch is seen whole or not at all (see `View`).
    pub fn view(&self) -> Result<View<'_>, StoreError> {
        let head = self.head.read().map_err(|_| StoreError::Poisoned)?;
        Ok(View::new(head))
    }

    /// Series ids matching a tag query (the index's snapshot at the time of the call).
    pub fn find(&self, query: &TagQuery, work_max: u64) -> Result<Vec<SeriesId>, StoreError> {
        Ok(self.index.snapshot()?.find(query, work_max)?)
    }
}

/// Splits one series' samples into runs of the same value tag (plain vs cumulative histograms).
fn push_groups(groups: &mut Vec<Group>, id: SeriesId, series: &SeriesSamples) {
    let tag = |v: &Value| std::mem::discriminant(v);
    let first_new = groups.len();
    for (ts_ms, value) in &series.samples {
        let continues = groups.len() > first_new
            && groups
                .last()
                .is_some_and(|g| tag(&g.samples[0].1) == tag(value));
        if !continues {
            groups.push(Group {
                id,
                samples: Vec::new(),
            });
        }
        if let Some(group) = groups.last_mut() {
            group.samples.push((*ts_ms, value.clone()));
        }
    }
}

/// Cumulative histograms become differences from the series' previous cumulative submission.
fn differences(state: &mut CumulativeState, mut groups: Vec<Group>) -> Vec<Group> {
    for group in &mut groups {
        for (_, value) in &mut group.samples {
            if let Value::CumulativeHistogram(cumulative) = value {
                *value = Value::Histogram(state.difference(group.id, cumulative));
            }
        }
    }
    groups
}

fn activity_of(group: &Group) -> [(SeriesId, i64); 2] {
    let ts = group.samples.iter().map(|(ts_ms, _)| *ts_ms);
    let first = ts.clone().min().unwrap_or(i64::MAX);
    let last = ts.max().unwrap_or(i64::MIN);
    [(group.id, first), (group.id, last)]
}
