//! The series index: stream key ↔ dense [`SeriesId`], the kind and activity range of each
//! series, an inverted index over `category:value` and over metric names, and cardinality counts.
//!
//! Concurrency: one `RwLock` around append-only state. Series ids are dense and assigned in
//! order, and a series record never changes once added (only its activity range widens, through
//! atomics). So a reader's consistent snapshot is just a watermark — the series count when the
//! snapshot was taken — and every read through the snapshot ignores ids at or above it. Readers
//! share the read lock, the hot write path (lookup of an existing series, activity updates)
//! takes only the read lock, and the write lock is held only to add one new series. No copy of
//! the index is ever made, so a snapshot costs nothing at a million series (a copy-on-write
//! `arc-swap` design would copy or need persistent maps; not worth a dependency yet).
//!
//! Persistence: an append-only file of new-series records, each with a CRC32C, replayed on
//! open; a torn tail is truncated, damage before the tail is a typed error (see `FORMAT.md`).
//! Activity ranges are not persisted here: the write path rebuilds them from the data it replays.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::hash::BuildHasher;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use crate::batch::KeyRef;
use crate::cardinality::{
    Activity, CardinalityLimit, CardinalityOptions, CardinalityStats, Limiter,
};
use crate::error::IndexError;
use crate::key::{StreamKey, KEY_TEXT_SIZE_MAX};
use crate::key_parts::{At, KeyParts};
use crate::series::{Kind, SeriesId};

/// Most series one index holds (ids are `u32`).
pub const SERIES_MAX: u32 = u32::MAX - 1;
/// File magic, the first 8 bytes of an index file.
pub const INDEX_MAGIC: [u8; 8] = *b"STRATAIX";
/// Index file format version: the only one written or read.
pub const INDEX_VERSION: u32 = 2;
/// Magic, version and the header's CRC32C.
pub const INDEX_HEADER_SIZE_BYTES: usize = 16;
/// Record type: a new series.
const RECORD_NEW_SERIES: u8 = 1;
/// Record type: many new series with consecutive ids, LZ4-compressed together —
/// keys created together share most of their text (a host's tags), so a batch of new series
/// costs a fraction of their canonical text on disk.
const RECORD_SERIES_GROUP: u8 = 2;
/// Uncompressed bytes of one group record's series entries; more new series in one go make
/// several records. (LZ4's worst case on this is well under `RECORD_SIZE_MAX`.)
const GROUP_RAW_BYTES_MAX: usize = 1 << 20;
/// A group entry: kind, id, key length, then the key.
const GROUP_ENTRY_HEADER_BYTES: usize = 1 + 4 + 4;
/// Largest record payload: type, kind, id and the longest canonical key.
pub const RECORD_SIZE_MAX: usize = 1 + 1 + 4 + KEY_TEXT_SIZE_MAX;
/// Read buffer for replaying the index file on open.
const REPLAY_BUFFER_SIZE_BYTES: usize = 256 * 1024;
/// A key not in the index yet, while `resolve_with` works (never returned).
const MISSING: Resolved = Resolved::Id(SeriesId(u32::MAX));
/// Keys looked up, created or refused under one hold of the index's lock.
const KEYS_PER_LOCK_MAX: usize = 4096;

/// The stored facts of one series: 32 bytes.
#[derive(Debug)]
struct Series {
    /// The canonical key text, as its parts (parsed back only when a reader asks).
    key: At,
    kind: Kind,
    /// Earliest and latest sample timestamp seen, `i64::MAX`/`i64::MIN` before any.
    first_ts_ms: AtomicI64,
    last_ts_ms: AtomicI64,
}

/// What a reader learns about one series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesInfo {
    pub id: SeriesId,
    pub key: StreamKey,
    pub kind: Kind,
    /// `(first_ts_ms, last_ts_ms)`, or `None` before any sample.
    pub activity_ms: Option<(i64, i64)>,
}

/// Series counts by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cardinality {
    pub total: u64,
    pub numeric: u64,
    pub text: u64,
    pub histogram: u64,
}

/// Posting lists: ascending series ids.
pub(crate) type Postings = Vec<u32>;

/// Canonical key text → id: ids only, each key's text compared part by part (4 bytes a slot
/// where a map of `Arc<str>` keys held 24). Keys come from clients, so the hasher is seeded per
/// process (foldhash: a few times faster than SipHash on ~100-byte keys, still randomly seeded).
#[derive(Default)]
struct KeyTable {
    ids: hashbrown::HashTable<u32>,
    hasher: foldhash::quality::RandomState,
}

impl KeyTable {
    fn get(&self, text: &str, series: &[Series], keys: &KeyParts) -> Option<u32> {
        let hash = self.hasher.hash_one(text.as_bytes());
        let id = self
            .ids
            .find(hash, |&id| keys.eq(series[id as usize].key, text))?;
        Some(*id)
    }

    fn insert_new(&mut self, id: u32, text: &str, series: &[Series], keys: &KeyParts) {
        let hash = self.hasher.hash_one(text.as_bytes());
        let hasher = &self.hasher;
        // Growing rehashes every key: each is written back into one buffer.
        let scratch = std::cell::RefCell::new(Vec::new());
        self.ids.insert_unique(hash, id, |&other| {
            let mut bytes = scratch.borrow_mut();
            bytes.clear();
            keys.write(series[other as usize].key, &mut bytes);
            hasher.hash_one(bytes.as_slice())
        });
    }

    fn len(&self) -> usize {
        self.ids.len()
    }
}

#[derive(Default)]
pub(crate) struct Inner {
    series: Vec<Series>,
    keys: KeyParts,
    by_key: KeyTable,
    pub(crate) names: BTreeMap<String, Postings>,
    pub(crate) tags: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Postings>>,
    pub(crate) kinds: [Postings; 3],
    file: Option<IndexFile>,
    failed: bool,
    /// Cardinality limits, once set (`SeriesIndex::set_limits`).
    limiter: Option<Limiter>,
}

/// How `SeriesIndex::resolve_limited` resolved one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The series (found, or created now).
    Id(SeriesId),
    /// The key exists with another kind.
    OtherKind(SeriesId, Kind),
    /// The key is new and a cardinality limit refused it.
    Refused(CardinalityLimit),
}

/// The series' activity, as the cardinality limiter counts it.
struct ActivityOf<'a>(&'a [Series]);

impl Activity for ActivityOf<'_> {
    fn series_count(&self) -> usize {
        self.0.len()
    }

    fn last_ts_ms(&self, id: usize) -> Option<i64> {
        let last = self.0.get(id)?.last_ts_ms.load(Ordering::Relaxed);
        (last != i64::MIN).then_some(last)
    }
}

struct IndexFile {
    path: PathBuf,
    file: File,
    size_bytes: u64,
}

/// The series index. Cheap to share behind an `Arc`.
pub struct SeriesIndex {
    inner: RwLock<Inner>,
}

impl Default for SeriesIndex {
    fn default() -> SeriesIndex {
        SeriesIndex::in_memory()
    }
}

impl SeriesIndex {
    /// An index with no file (tests, tools).
    pub fn in_memory() -> SeriesIndex {
        SeriesIndex {
            inner: RwLock::new(Inner::default()),
        }
    }

    /// Opens or creates the index file at `path`, replaying every record.
    pub fn open(path: &Path) -> Result<SeriesIndex, IndexError> {
        let io = |error| IndexError::Io {
            path: path.to_path_buf(),
            error,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let file_size_bytes = file.metadata().map_err(io)?.len();
        let mut inner = Inner::default();
        let good_bytes = {
            let mut reader = BufReader::with_capacity(REPLAY_BUFFER_SIZE_BYTES, &file);
            replay(path, &mut reader, file_size_bytes, &mut inner)?
        };
        if good_bytes < file_size_bytes || file_size_bytes < INDEX_HEADER_SIZE_BYTES as u64 {
            // A torn tail (or a torn header of an empty index): cut it and start clean there.
            file.set_len(good_bytes).map_err(io)?;
            if good_bytes == 0 {
                file.seek(SeekFrom::Start(0)).map_err(io)?;
                file.write_all(&header_bytes()).map_err(io)?;
            }
            file.sync_all().map_err(io)?;
            if good_bytes == 0 {
                // A new file: its directory entry must be durable too.
                sync_parent_dir(path).map_err(io)?;
            }
        }
        let size_bytes = file.seek(SeekFrom::End(0)).map_err(io)?;
        inner.file = Some(IndexFile {
            path: path.to_path_buf(),
            file,
            size_bytes,
        });
        inner.assert_invariants();
        Ok(SeriesIndex {
            inner: RwLock::new(inner),
        })
    }

    /// Reads the index file without changing it (for inspection tools, possibly while a
    /// server has the store open): a torn tail is left alone and its size returned.
    pub fn open_read_only(path: &Path) -> Result<(SeriesIndex, u64), IndexError> {
        let io = |error| IndexError::Io {
            path: path.to_path_buf(),
            error,
        };
        let file = File::open(path).map_err(io)?;
        let file_size_bytes = file.metadata().map_err(io)?.len();
        let mut inner = Inner::default();
        let mut reader = BufReader::with_capacity(REPLAY_BUFFER_SIZE_BYTES, &file);
        let good_bytes = replay(path, &mut reader, file_size_bytes, &mut inner)?;
        inner.assert_invariants();
        let index = SeriesIndex {
            inner: RwLock::new(inner),
        };
        Ok((index, file_size_bytes.saturating_sub(good_bytes)))
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, Inner>, IndexError> {
        let guard = self.inner.read().map_err(|_| IndexError::Failed)?;
        if guard.failed {
            return Err(IndexError::Failed);
        }
        Ok(guard)
    }

    /// The id of `key`, adding it (durably appended to the file, not yet fsynced: see
    /// [`SeriesIndex::sync`]) if new. A key has one kind for life.
    /// One hash of the key's canonical text (printed when the key was made) per call.
    pub fn get_or_create(&self, key: &StreamKey, kind: Kind) -> Result<SeriesId, IndexError> {
        let text = key.canonical_str();
        if let Some(id) = self.read()?.find(text, kind)? {
            return Ok(id);
        }
        let mut inner = self.inner.write().map_err(|_| IndexError::Failed)?;
        if inner.failed {
            return Err(IndexError::Failed);
        }
        if let Some(id) = inner.find(text, kind)? {
            return Ok(id);
        }
        let ids = inner.create_many(vec![(key.clone(), kind)])?;
        Ok(ids[0])
    }

    /// The ids of a batch's keys, in order, creating series for new canonical texts. One read
    /// lock for the lookups; the write lock only if some key is new. A text that is new and not
    /// canonical is refused (`NotCanonical`): it would otherwise become a second series for an
    /// existing key. An id must exist, and a key that exists with another kind is an error.
    pub fn resolve(&self, keys: &[(KeyRef<'_>, Kind)]) -> Result<Vec<SeriesId>, IndexError> {
        let resolved = self.resolve_partial(keys)?;
        let mut ids = Vec::with_capacity(resolved.len());
        for (r, &(_, requested)) in resolved.into_iter().zip(keys) {
            match r {
                Ok(id) => ids.push(id),
                Err((id, existing)) => {
                    return Err(IndexError::KindMismatch {
                        id,
                        existing,
                        requested,
                    })
                }
            }
        }
        Ok(ids)
    }

    /// As [`SeriesIndex::resolve`], but a key that exists with another kind is not an error:
    /// its slot holds `Err((id, existing kind))` and the other keys resolve as usual.
    #[allow(clippy::type_complexity)]
    pub fn resolve_partial(
        &self,
        keys: &[(KeyRef<'_>, Kind)],
    ) -> Result<Vec<Result<SeriesId, (SeriesId, Kind)>>, IndexError> {
        let resolved = self.resolve_with(keys, None)?;
        Ok(resolved
            .into_iter()
            .map(|r| match r {
                Resolved::Id(id) => Ok(id),
                Resolved::OtherKind(id, kind) => Err((id, kind)),
                Resolved::Refused(_) => unreachable!("no limits without a source"),
            })
            .collect())
    }

    /// As [`SeriesIndex::resolve_partial`], holding the series it would create to the limits
    /// set with [`SeriesIndex::set_limits`], for `source`: a key refused holds
    /// `Resolved::Refused`. Existing series resolve as usual whatever the limits.
    /// `now_ms` is the limits' clock (see `cardinality`).
    pub fn resolve_limited(
        &self,
        keys: &[(KeyRef<'_>, Kind)],
        source: &str,
        now_ms: i64,
    ) -> Result<Vec<Resolved>, IndexError> {
        self.resolve_with(keys, Some((source, now_ms)))
    }

    /// The ids of keys that exist (with any kind), `None` for the others; creates nothing.
    pub fn lookup_partial(
        &self,
        keys: &[(KeyRef<'_>, Kind)],
    ) -> Result<Vec<Option<SeriesId>>, IndexError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(KEYS_PER_LOCK_MAX) {
            let inner = self.read()?;
            out.extend(chunk.iter().map(|&(key, _)| match key {
                KeyRef::Text(text) => inner.lookup_text(text).map(|(id, _)| id),
                KeyRef::Id(id) => inner.series.get(id.0 as usize).map(|_| id),
            }));
        }
        Ok(out)
    }

    /// Sets the cardinality limits `resolve_limited` holds new series to.
    pub fn set_limits(&self, opts: CardinalityOptions) -> Result<(), IndexError> {
        let mut inner = self.inner.write().map_err(|_| IndexError::Failed)?;
        inner.limiter = Some(Limiter::new(opts));
        Ok(())
    }

    /// The cardinality counts (`None` without limits set).
    pub fn cardinality_stats(&self) -> Result<Option<CardinalityStats>, IndexError> {
        Ok(self.read()?.limiter.as_ref().map(Limiter::stats))
    }

    /// The limits set, if any.
    pub fn limits(&self) -> Result<Option<CardinalityOptions>, IndexError> {
        Ok(self.read()?.limiter.as_ref().map(|l| *l.options()))
    }

    /// The keys in chunks of `KEYS_PER_LOCK_MAX`, each looked up under the read lock; a chunk's
    /// new keys are refused there too when the source's limits refuse any new series now, so
    /// that a body of 10^6 refused keys costs a hash lookup each and never blocks a reader.
    /// Only a chunk with a key that may be created takes the write lock (a reader waits behind
    /// it, and behind a writer merely waiting for it).
    fn resolve_with(
        &self,
        keys: &[(KeyRef<'_>, Kind)],
        source: Option<(&str, i64)>,
    ) -> Result<Vec<Resolved>, IndexError> {
        let mut out = Vec::with_capacity(keys.len());
        for (n, chunk) in keys.chunks(KEYS_PER_LOCK_MAX).enumerate() {
            let start = n * KEYS_PER_LOCK_MAX;
            let missing = {
                let inner = self.read()?;
                let missing = inner.look_up(chunk, &mut out)?;
                if missing == 0 {
                    0
                } else {
                    inner.refuse_now(chunk, &mut out[start..], source)
                }
            };
            assert_eq!(out.len(), start + chunk.len());
            if missing > 0 {
                self.create_chunk(chunk, &mut out[start..], source)?;
            }
        }
        debug_assert!(out.iter().all(|r| *r != MISSING));
        Ok(out)
    }

    /// Creates the chunk's missing keys that the limits admit, under the write lock.
    fn create_chunk(
        &self,
        keys: &[(KeyRef<'_>, Kind)],
        out: &mut [Resolved],
        source: Option<(&str, i64)>,
    ) -> Result<(), IndexError> {
        let mut guard = self.inner.write().map_err(|_| IndexError::Failed)?;
        if guard.failed {
            return Err(IndexError::Failed);
        }
        let inner = &mut *guard;
        // Limits apply to writes that name a source, and only when some key is new.
        let mut limiter = match (source, inner.limiter.take()) {
            (Some((source, now_ms)), Some(mut limiter)) => {
                limiter.prepare(&ActivityOf(&inner.series), now_ms);
                let slot = limiter.slot_of(source);
                Some((limiter, slot))
            }
            (_, limiter) => {
                inner.limiter = limiter;
                None
            }
        };
        let result = inner.create_missing(keys, out, &mut limiter);
        if let Some((limiter, _)) = limiter {
            inner.limiter = Some(limiter);
        }
        result
    }

    /// The id and kind of `key`, if present.
    pub fn lookup(&self, key: &StreamKey) -> Result<Option<(SeriesId, Kind)>, IndexError> {
        let inner = self.read()?;
        Ok(inner.lookup_text(key.canonical_str()))
    }

    /// The canonical key text of series `id`, if it exists.
    pub fn key_text(&self, id: SeriesId) -> Result<Option<String>, IndexError> {
        let inner = self.read()?;
        Ok(inner
            .series
            .get(id.0 as usize)
            .map(|s| inner.keys.text(s.key)))
    }

    /// The activity ranges of series `from..` (at most `max`), in id order, without building
    /// or parsing keys: alerting reads every series' newest sample time once per period.
    pub fn activities(
        &self,
        from: SeriesId,
        max: usize,
    ) -> Result<Vec<Option<(i64, i64)>>, IndexError> {
        let inner = self.read()?;
        let start = (from.0 as usize).min(inner.series.len());
        Ok(inner.series[start..]
            .iter()
            .take(max)
            .map(activity)
            .collect())
    }

    /// The kind of series `id`, if it exists (no key text is built or parsed).
    pub fn kind_of(&self, id: SeriesId) -> Result<Option<Kind>, IndexError> {
        Ok(self.read()?.series.get(id.0 as usize).map(|s| s.kind))
    }

    /// Widens the activity range of each `(series, ts_ms)`; unknown ids are ignored.
    pub fn note_activity(&self, samples: &[(SeriesId, i64)]) -> Result<(), IndexError> {
        let inner = self.read()?;
        for &(SeriesId(id), ts_ms) in samples {
            if let Some(series) = inner.series.get(id as usize) {
                // Usually inside the range already: a load, not a locked read-modify-write.
                if series.first_ts_ms.load(Ordering::Relaxed) > ts_ms {
                    series.first_ts_ms.fetch_min(ts_ms, Ordering::Relaxed);
                }
                if series.last_ts_ms.load(Ordering::Relaxed) < ts_ms {
                    series.last_ts_ms.fetch_max(ts_ms, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Makes every series added so far durable (fsync).
    pub fn sync(&self) -> Result<(), IndexError> {
        let inner = self.read()?;
        if let Some(f) = &inner.file {
            f.file.sync_data().map_err(|error| IndexError::Io {
                path: f.path.clone(),
                error,
            })?;
        }
        Ok(())
    }

    /// A consistent view: the series that exist now, and no later ones.
    pub fn snapshot(&self) -> Result<Snapshot<'_>, IndexError> {
        let inner = self.read()?;
        let mut counts = Cardinality {
            total: inner.series.len() as u64,
            ..Cardinality::default()
        };
        counts.numeric = inner.kinds[Kind::Numeric.slot()].len() as u64;
        counts.text = inner.kinds[Kind::Text.slot()].len() as u64;
        counts.histogram = inner.kinds[Kind::Histogram.slot()].len() as u64;
        Ok(Snapshot {
            index: self,
            series_count: inner.series.len() as u32,
            counts,
        })
    }
}

/// A reader's consistent view of the index: series with ids below `series_count`.
pub struct Snapshot<'a> {
    index: &'a SeriesIndex,
    series_count: u32,
    counts: Cardinality,
}

impl Snapshot<'_> {
    pub fn series_count(&self) -> u32 {
        self.series_count
    }

    /// Series counts by kind, as of the snapshot.
    pub fn cardinality(&self) -> Cardinality {
        self.counts
    }

    pub fn series(&self, id: SeriesId) -> Result<Option<SeriesInfo>, IndexError> {
        if id.0 >= self.series_count {
            return Ok(None);
        }
        let inner = self.index.read()?;
        let Some(s) = inner.series.get(id.0 as usize) else {
            return Ok(None);
        };
        // Stored keys were canonical when added, so this parse cannot fail short of a bug.
        let key = StreamKey::parse(&inner.keys.text(s.key)).map_err(IndexError::Key)?;
        Ok(Some(SeriesInfo {
            id,
            key,
            kind: s.kind,
            activity_ms: activity(s),
        }))
    }

    /// Tag categories in byte order, at most `limit`.
    pub fn categories(&self, limit: usize) -> Result<Vec<Vec<u8>>, IndexError> {
        let inner = self.index.read()?;
        let visible =
            |values: &BTreeMap<Vec<u8>, Postings>| values.values().any(|p| self.visible_len(p) > 0);
        Ok(inner
            .tags
            .iter()
            .filter(|(_, values)| visible(values))
            .map(|(c, _)| c.clone())
            .take(limit)
            .collect())
    }

    /// Values of one category with how many series carry each, in byte order, at most `limit`.
    pub fn values(&self, category: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, u64)>, IndexError> {
        let inner = self.index.read()?;
        let Some(values) = inner.tags.get(category) else {
            return Ok(Vec::new());
        };
        Ok(values
            .iter()
            .map(|(v, p)| (v.clone(), self.visible_len(p) as u64))
            .filter(|(_, n)| *n > 0)
            .take(limit)
            .collect())
    }

    /// Metric names with their series counts, in byte order, at most `limit`.
    pub fn names(&self, limit: usize) -> Result<Vec<(String, u64)>, IndexError> {
        let inner = self.index.read()?;
        Ok(inner
            .names
            .iter()
            .map(|(n, p)| (n.clone(), self.visible_len(p) as u64))
            .filter(|(_, n)| *n > 0)
            .take(limit)
            .collect())
    }

    fn visible_len(&self, postings: &[u32]) -> usize {
        postings.partition_point(|&id| id < self.series_count)
    }

    /// Runs `f` over the locked index with this snapshot's watermark (for the query evaluator).
    pub(crate) fn with_view<T>(&self, f: impl FnOnce(&View<'_>) -> T) -> Result<T, IndexError> {
        let inner = self.index.read()?;
        Ok(f(&View {
            inner: &inner,
            series_count: self.series_count,
        }))
    }
}

/// The locked index seen through a snapshot's watermark.
pub(crate) struct View<'a> {
    pub(crate) inner: &'a Inner,
    pub(crate) series_count: u32,
}

impl View<'_> {
    /// The visible prefix of a posting list.
    pub(crate) fn visible<'p>(&self, postings: &'p [u32]) -> &'p [u32] {
        &postings[..postings.partition_point(|&id| id < self.series_count)]
    }

    pub(crate) fn kind_postings(&self, kind: Kind) -> &[u32] {
        self.visible(&self.inner.kinds[kind.slot()])
    }

    pub(crate) fn activity(&self, id: u32) -> Option<(i64, i64)> {
        self.inner.series.get(id as usize).and_then(activity)
    }
}

fn activity(s: &Series) -> Option<(i64, i64)> {
    let first = s.first_ts_ms.load(Ordering::Relaxed);
    let last = s.last_ts_ms.load(Ordering::Relaxed);
    (first <= last).then_some((first, last))
}

impl Inner {
    /// Pushes onto `out` what each key resolves to now (`MISSING` when new); how many are new.
    fn look_up(
        &self,
        keys: &[(KeyRef<'_>, Kind)],
        out: &mut Vec<Resolved>,
    ) -> Result<usize, IndexError> {
        let mut missing = 0usize;
        for &(key, kind) in keys {
            let found = match key {
                KeyRef::Text(text) => self.lookup_text(text),
                KeyRef::Id(id) => match self.series.get(id.0 as usize) {
                    Some(series) => Some((id, series.kind)),
                    None => return Err(IndexError::UnknownSeries { id }),
                },
            };
            out.push(match found {
                Some((id, existing)) if existing == kind => Resolved::Id(id),
                Some((id, existing)) => Resolved::OtherKind(id, existing),
                None => {
                    missing += 1;
                    MISSING
                }
            });
        }
        Ok(missing)
    }

    /// Under the read lock: refuses every `MISSING` slot of `out` when the limits refuse any new
    /// series of `source` now (each distinct key counted once, as `create_missing` counts
    /// them); how many slots are left missing.
    fn refuse_now(
        &self,
        keys: &[(KeyRef<'_>, Kind)],
        out: &mut [Resolved],
        source: Option<(&str, i64)>,
    ) -> usize {
        let missing = out.iter().filter(|r| **r == MISSING).count();
        let (Some((source, now_ms)), Some(limiter)) = (source, self.limiter.as_ref()) else {
            return missing;
        };
        let Some(limit) = limiter.refuses_now(source, now_ms) else {
            return missing;
        };
        let mut distinct: HashSet<&str, foldhash::quality::RandomState> =
            HashSet::with_capacity_and_hasher(missing, Default::default());
        for (slot, &(key, _)) in keys.iter().enumerate() {
            if out[slot] != MISSING {
                continue;
            }
            let KeyRef::Text(text) = key else {
                unreachable!("ids are never missing");
            };
            distinct.insert(text);
            out[slot] = Resolved::Refused(limit);
        }
        limiter.count_refused(limit, distinct.len() as u64);
        0
    }

    /// Creates the series of the `MISSING` slots of `out` (see `resolve_with`), together (one
    /// group record), each admitted by `limiter` first when there is one.
    fn create_missing(
        &mut self,
        keys: &[(KeyRef<'_>, Kind)],
        out: &mut [Resolved],
        limiter: &mut Option<(Limiter, u32)>,
    ) -> Result<(), IndexError> {
        // A text repeated in the batch must find the pending series (or the refusal).
        let first_new = self.series.len();
        let mut new: Vec<(StreamKey, Kind)> = Vec::new();
        let mut new_by_text: HashMap<&str, Resolved, foldhash::quality::RandomState> =
            HashMap::default();
        for (slot, &(key, kind)) in keys.iter().enumerate() {
            if out[slot] != MISSING {
                continue;
            }
            let KeyRef::Text(text) = key else {
                unreachable!("ids are never missing");
            };
            // Another writer (or an earlier slot with the same text) may have added it.
            let found = self
                .lookup_text(text)
                .or_else(|| match new_by_text.get(text)? {
                    Resolved::Id(id) => Some((*id, new[(id.0 as usize) - first_new].1)),
                    _ => None,
                });
            if let (None, Some(&refused)) = (found, new_by_text.get(text)) {
                out[slot] = refused;
                continue;
            }
            out[slot] = match found {
                Some((id, existing)) if existing == kind => Resolved::Id(id),
                Some((id, existing)) => Resolved::OtherKind(id, existing),
                None => {
                    // Checked before the key is parsed: a flood of refused keys costs little.
                    let refused = limiter.as_mut().and_then(|(l, source)| l.refuses(*source));
                    if let Some(limit) = refused {
                        new_by_text.insert(text, Resolved::Refused(limit));
                        out[slot] = Resolved::Refused(limit);
                        continue;
                    }
                    let parsed = StreamKey::parse(text).map_err(IndexError::Key)?;
                    if parsed.canonical_str() != text {
                        return Err(IndexError::NotCanonical {
                            text: text.to_owned(),
                        });
                    }
                    let id = u32::try_from(first_new + new.len())
                        .ok()
                        .filter(|&id| id < SERIES_MAX)
                        .ok_or(IndexError::Full)?;
                    if let Some((limiter, source)) = limiter {
                        limiter.created(id, *source);
                    }
                    new.push((parsed, kind));
                    new_by_text.insert(text, Resolved::Id(SeriesId(id)));
                    Resolved::Id(SeriesId(id))
                }
            };
        }
        let created = self.create_many(new)?;
        debug_assert!(created
            .iter()
            .enumerate()
            .all(|(i, id)| id.0 as usize == first_new + i));
        Ok(())
    }

    /// Adds new series with the next ids, in order: their records appended to the file (one
    /// write; group records for several), then the in-memory maps. On a
    /// failed append nothing is added.
    fn create_many(&mut self, new: Vec<(StreamKey, Kind)>) -> Result<Vec<SeriesId>, IndexError> {
        let first = self.series.len();
        let end = first.checked_add(new.len()).ok_or(IndexError::Full)?;
        if end > SERIES_MAX as usize {
            return Err(IndexError::Full);
        }
        let entries: Vec<(u32, &str, Kind)> = new
            .iter()
            .enumerate()
            .map(|(i, (key, kind))| ((first + i) as u32, key.canonical_str(), *kind))
            .collect();
        let records = encode_records(&entries);
        self.append(&records)?;
        let mut ids = Vec::with_capacity(new.len());
        for (i, (key, kind)) in new.into_iter().enumerate() {
            let id = (first + i) as u32;
            self.insert(id, &key, kind);
            ids.push(SeriesId(id));
        }
        Ok(ids)
    }

    /// The id and kind of the series whose canonical key is `text`.
    fn lookup_text(&self, text: &str) -> Option<(SeriesId, Kind)> {
        let id = self.by_key.get(text, &self.series, &self.keys)?;
        Some((SeriesId(id), self.series[id as usize].kind))
    }

    fn find(&self, text: &str, kind: Kind) -> Result<Option<SeriesId>, IndexError> {
        let Some(id) = self.by_key.get(text, &self.series, &self.keys) else {
            return Ok(None);
        };
        let existing = self.series[id as usize].kind;
        if existing != kind {
            return Err(IndexError::KindMismatch {
                id: SeriesId(id),
                existing,
                requested: kind,
            });
        }
        Ok(Some(SeriesId(id)))
    }

    fn insert(&mut self, id: u32, key: &StreamKey, kind: Kind) {
        assert_eq!(id as usize, self.series.len(), "ids are dense");
        // Ids only grow, so pushing keeps every posting list ascending.
        // Look up before inserting: most names and tags exist already, so no key is copied.
        match self.names.get_mut(key.name()) {
            Some(postings) => postings.push(id),
            None => {
                self.names.insert(key.name().to_string(), vec![id]);
            }
        }
        for tag in key.tags() {
            let values = match self.tags.get_mut(tag.category()) {
                Some(values) => values,
                None => self.tags.entry(tag.category().to_vec()).or_default(),
            };
            match values.get_mut(tag.value()) {
                Some(postings) => postings.push(id),
                None => {
                    values.insert(tag.value().to_vec(), vec![id]);
                }
            }
        }
        self.kinds[kind.slot()].push(id);
        let text = key.canonical_str();
        // Callers looked the key up under the same lock (one hash lookup a new key).
        debug_assert!(
            self.by_key.get(text, &self.series, &self.keys).is_none(),
            "a key is added once"
        );
        let at = self.keys.push(text);
        self.series.push(Series {
            key: at,
            kind,
            first_ts_ms: AtomicI64::new(i64::MAX),
            last_ts_ms: AtomicI64::new(i64::MIN),
        });
        self.by_key.insert_new(id, text, &self.series, &self.keys);
    }

    /// Appends encoded records; on failure cuts the file back so no torn record stays before
    /// later ones, and if even that fails refuses all further work.
    fn append(&mut self, records: &[u8]) -> Result<(), IndexError> {
        let Some(f) = self.file.as_mut() else {
            return Ok(());
        };
        let result = f.file.write_all(records);
        if let Err(error) = result {
            let path = f.path.clone();
            if f.file.set_len(f.size_bytes).is_err() || f.file.seek(SeekFrom::End(0)).is_err() {
                self.failed = true;
            }
            return Err(IndexError::Io { path, error });
        }
        f.size_bytes += records.len() as u64;
        Ok(())
    }

    fn assert_invariants(&self) {
        assert_eq!(self.by_key.len(), self.series.len());
        let kinds: usize = self.kinds.iter().map(Vec::len).sum();
        assert_eq!(kinds, self.series.len());
        for postings in self
            .names
            .values()
            .chain(self.tags.values().flat_map(|v| v.values()))
        {
            assert!(
                postings.windows(2).all(|w| w[0] < w[1]),
                "postings ascending"
            );
        }
    }
}

fn sync_parent_dir(path: &Path) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

fn header_bytes() -> [u8; INDEX_HEADER_SIZE_BYTES] {
    let mut header = [0u8; INDEX_HEADER_SIZE_BYTES];
    header[..8].copy_from_slice(&INDEX_MAGIC);
    header[8..12].copy_from_slice(&INDEX_VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&header[..12]);
    header[12..].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Frames a payload: `size: u32 LE, crc32c(payload): u32 LE, payload`.
fn frame(payload: &[u8], out: &mut Vec<u8>) {
    assert!(!payload.is_empty() && payload.len() <= RECORD_SIZE_MAX);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// The records for new series `entries` (consecutive ids): runs of them as group records
/// (`type 2, count: u32, raw size: u32, lz4 block of entries`, each entry `kind, id: u32, key
/// size: u32, key`); a lone series or a key too big for a group gets `type 1, kind, id: u32,
/// key`.
fn encode_records(entries: &[(u32, &str, Kind)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut raw = Vec::new();
    let mut count = 0u32;
    let mut payload = Vec::new();
    let flush_group = |raw: &mut Vec<u8>, count: &mut u32, out: &mut Vec<u8>| {
        if *count == 0 {
            return;
        }
        let mut payload = Vec::with_capacity(9 + raw.len() / 2);
        payload.push(RECORD_SERIES_GROUP);
        payload.extend_from_slice(&count.to_le_bytes());
        payload.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        payload.extend_from_slice(&lz4_flex::block::compress(raw));
        frame(&payload, out);
        raw.clear();
        *count = 0;
    };
    for &(id, text, kind) in entries {
        let entry_bytes = GROUP_ENTRY_HEADER_BYTES + text.len();
        if entries.len() == 1 || entry_bytes > GROUP_RAW_BYTES_MAX {
            flush_group(&mut raw, &mut count, &mut out);
            payload.clear();
            payload.push(RECORD_NEW_SERIES);
            payload.push(kind as u8);
            payload.extend_from_slice(&id.to_le_bytes());
            payload.extend_from_slice(text.as_bytes());
            frame(&payload, &mut out);
            continue;
        }
        if raw.len() + entry_bytes > GROUP_RAW_BYTES_MAX {
            flush_group(&mut raw, &mut count, &mut out);
        }
        raw.push(kind as u8);
        raw.extend_from_slice(&id.to_le_bytes());
        raw.extend_from_slice(&(text.len() as u32).to_le_bytes());
        raw.extend_from_slice(text.as_bytes());
        count += 1;
    }
    flush_group(&mut raw, &mut count, &mut out);
    out
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Replays the index file (`size_bytes` long, read from its start through `reader`) into
/// `inner`, one record at a time; returns the length of the good prefix (the rest is a torn
/// tail). Memory: one record at a time, at most `RECORD_SIZE_MAX` bytes.
fn replay(
    path: &Path,
    reader: &mut impl Read,
    size_bytes: u64,
    inner: &mut Inner,
) -> Result<u64, IndexError> {
    let io = |error| IndexError::Io {
        path: path.to_path_buf(),
        error,
    };
    let corrupt = |offset: u64, what| IndexError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what,
    };
    if size_bytes < INDEX_HEADER_SIZE_BYTES as u64 {
        // Created but the header never fully reached the disk: nothing else can follow it.
        return Ok(0);
    }
    let mut header = [0u8; INDEX_HEADER_SIZE_BYTES];
    reader.read_exact(&mut header).map_err(io)?;
    if header != header_bytes() {
        return Err(IndexError::BadHeader {
            path: path.to_path_buf(),
        });
    }
    let mut pos = INDEX_HEADER_SIZE_BYTES as u64;
    let mut payload = Vec::new();
    while pos < size_bytes {
        let rest = size_bytes - pos;
        if rest < 8 {
            return Ok(pos);
        }
        let mut head = [0u8; 8];
        reader.read_exact(&mut head).map_err(io)?;
        let size = u64::from(le_u32(&head, 0));
        // A record that does not fit in the rest of the file is a torn write, as is a
        // zero-filled tail; a size of zero amid data is damage.
        if size == 0 || size > rest - 8 {
            let torn = size > 0 && size <= RECORD_SIZE_MAX as u64;
            if torn || (head == [0; 8] && rest_is_zero(reader).map_err(io)?) {
                return Ok(pos);
            }
            return Err(corrupt(pos, "damaged record size"));
        }
        let last = 8 + size == rest;
        if size > RECORD_SIZE_MAX as u64 {
            return if last {
                Ok(pos)
            } else {
                Err(corrupt(pos, "record size beyond maximum"))
            };
        }
        payload.resize(size as usize, 0);
        reader.read_exact(&mut payload).map_err(io)?;
        if crc32c::crc32c(&payload) != le_u32(&head, 4) {
            // The last record may be torn inside (size written, payload not); earlier ones not.
            return if last {
                Ok(pos)
            } else {
                Err(corrupt(pos, "record checksum mismatch before the tail"))
            };
        }
        apply_record(&payload, inner).map_err(|what| corrupt(pos, what))?;
        pos += 8 + size;
    }
    Ok(pos)
}

/// Whether everything left in `reader` is zero bytes (read in bounded chunks).
fn rest_is_zero(reader: &mut impl Read) -> std::io::Result<bool> {
    const CHUNK_SIZE_BYTES: usize = 64 * 1024;
    let mut buf = vec![0u8; CHUNK_SIZE_BYTES];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(true);
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
    }
}

fn apply_record(payload: &[u8], inner: &mut Inner) -> Result<(), &'static str> {
    match payload.first() {
        Some(&RECORD_NEW_SERIES) if payload.len() >= 7 => {
            apply_series(payload[1], le_u32(payload, 2), &payload[6..], inner)
        }
        Some(&RECORD_SERIES_GROUP) if payload.len() >= 9 => {
            let count = le_u32(payload, 1) as usize;
            let raw_size = le_u32(payload, 5) as usize;
            // Bounded before anything is allocated: a group never holds more than this.
            if count == 0 || raw_size > GROUP_RAW_BYTES_MAX {
                return Err("group size beyond maximum");
            }
            let raw = lz4_flex::block::decompress(&payload[9..], raw_size)
                .map_err(|_| "group does not decompress")?;
            if raw.len() != raw_size {
                return Err("group size mismatch");
            }
            let mut at = 0;
            for _ in 0..count {
                let header = raw
                    .get(at..at + GROUP_ENTRY_HEADER_BYTES)
                    .ok_or("group entry truncated")?;
                let key_size = le_u32(header, 5) as usize;
                let start = at + GROUP_ENTRY_HEADER_BYTES;
                let key = raw
                    .get(start..start + key_size)
                    .ok_or("group key truncated")?;
                apply_series(header[0], le_u32(header, 1), key, inner)?;
                at = start + key_size;
            }
            if at != raw.len() {
                return Err("group has trailing bytes");
            }
            Ok(())
        }
        _ => Err("unknown record type"),
    }
}

fn apply_series(kind: u8, id: u32, key: &[u8], inner: &mut Inner) -> Result<(), &'static str> {
    let kind = Kind::from_u8(kind).ok_or("unknown series kind")?;
    if id as usize != inner.series.len() {
        return Err("series id out of order");
    }
    let text = std::str::from_utf8(key).map_err(|_| "key not UTF-8")?;
    let key = StreamKey::parse(text).map_err(|_| "key does not parse")?;
    if key.canonical_str() != text || inner.lookup_text(text).is_some() {
        return Err("key not canonical or repeated");
    }
    inner.insert(id, &key, kind);
    Ok(())
}

/// Fuzzing entry: replays `data` as a whole file and behind a valid header; never panics, and
/// whatever replays is internally consistent.
pub(crate) fn fuzz_replay(data: &[u8]) {
    for bytes in [data.to_vec(), [header_bytes().as_slice(), data].concat()] {
        let mut inner = Inner::default();
        let size_bytes = bytes.len() as u64;
        if let Ok(good) = replay(
            Path::new("fuzz"),
            &mut bytes.as_slice(),
            size_bytes,
            &mut inner,
        ) {
            assert!(good <= size_bytes);
            inner.assert_invariants();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Tag;
    use proptest::prelude::*;

    fn key(text: &str) -> StreamKey {
        StreamKey::parse(text).unwrap()
    }

    /// Keys of any length (one over a megabyte, longer than a page) read back and are found
    /// by their text, before and after a reopen; text they share is kept once.
    #[test]
    fn keys_of_any_length_read_back_from_their_parts() {
        assert_eq!(std::mem::size_of::<Series>(), 32);
        let tags: Vec<String> = (0..200)
            .map(|i| format!("c{i:03}{}:{}", "k".repeat(3_000), "v".repeat(4_000)))
            .collect();
        let long = key(&format!("long|ST[{}]", tags.join(",")));
        assert!(long.canonical_str().len() > 1 << 20);
        let mut keys: Vec<StreamKey> = (0..6_000)
            .map(|i| key(&format!("m{i}|ST[host:h{i},dc:{}]", "x".repeat(150))))
            .collect();
        keys.insert(3_000, long);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        let check = |index: &SeriesIndex| {
            for (i, k) in keys.iter().enumerate() {
                let id = SeriesId(i as u32);
                assert_eq!(index.lookup(k).unwrap(), Some((id, Kind::Numeric)));
                assert_eq!(index.key_text(id).unwrap().unwrap(), k.canonical_str());
            }
        };
        {
            let index = SeriesIndex::open(&path).unwrap();
            for (i, k) in keys.iter().enumerate() {
                let id = index.get_or_create(k, Kind::Numeric).unwrap();
                assert_eq!(id, SeriesId(i as u32));
            }
            check(&index);
            let inner = index.inner.read().unwrap();
            // The short keys' 150-byte tag is kept once: they take a few bytes each beside
            // their distinct parts, all in one page of lists.
            assert_eq!(inner.keys.list_pages(), 1);
            let long_bytes = keys[3_000].canonical_str().len();
            assert!(inner.keys.size_bytes() < long_bytes + (4 << 20));
        }
        check(&SeriesIndex::open(&path).unwrap());
    }

    #[test]
    fn ids_kinds_and_listing() {
        let index = SeriesIndex::in_memory();
        let a = index
            .get_or_create(&key("cpu|ST[host:a,dc:x]"), Kind::Numeric)
            .unwrap();
        let b = index
            .get_or_create(&key("cpu|ST[host:b,dc:x]"), Kind::Numeric)
            .unwrap();
        let c = index
            .get_or_create(&key("lat|ST[host:a]"), Kind::Histogram)
            .unwrap();
        assert_eq!((a, b, c), (SeriesId(0), SeriesId(1), SeriesId(2)));
        assert_eq!(
            index
                .get_or_create(&key("cpu|ST[dc:x,host:b]"), Kind::Numeric)
                .unwrap(),
            b
        );
        assert!(matches!(
            index.get_or_create(&key("lat|ST[host:a]"), Kind::Numeric),
            Err(IndexError::KindMismatch {
                existing: Kind::Histogram,
                ..
            })
        ));
        let snap = index.snapshot().unwrap();
        index.get_or_create(&key("late"), Kind::Text).unwrap();
        assert_eq!(
            snap.cardinality(),
            Cardinality {
                total: 3,
                numeric: 2,
                text: 0,
                histogram: 1
            }
        );
        assert_eq!(
            snap.categories(10).unwrap(),
            vec![b"dc".to_vec(), b"host".to_vec()]
        );
        assert_eq!(
            snap.values(b"host", 10).unwrap(),
            vec![(b"a".to_vec(), 2), (b"b".to_vec(), 1)]
        );
        assert_eq!(
            snap.names(10).unwrap(),
            vec![("cpu".to_string(), 2), ("lat".to_string(), 1)]
        );
        assert_eq!(snap.series(SeriesId(3)).unwrap(), None);
        assert_eq!(index.snapshot().unwrap().cardinality().text, 1);
        index.note_activity(&[(a, 50), (a, 10), (a, 30)]).unwrap();
        let info = snap.series(a).unwrap().unwrap();
        assert_eq!(info.activity_ms, Some((10, 50)));
        assert_eq!(snap.series(b).unwrap().unwrap().activity_ms, None);
    }

    #[test]
    fn reopen_replays_and_truncates_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("series.idx");
        let keys: Vec<StreamKey> = (0..20)
            .map(|i| key(&format!("m{i}|ST[i:{i},b\"AA==\":x]")))
            .collect();
        {
            let index = SeriesIndex::open(&path).unwrap();
            for (i, k) in keys.iter().enumerate() {
                let kind = Kind::ALL[i % 3];
                assert_eq!(index.get_or_create(k, kind).unwrap(), SeriesId(i as u32));
            }
            index.sync().unwrap();
        }
        let full = std::fs::read(&path).unwrap();
        // Every cut point: a prefix of the records survives, the rest is truncated.
        for cut in (INDEX_HEADER_SIZE_BYTES..full.len()).step_by(7) {
            std::fs::write(&path, &full[..cut]).unwrap();
            let index = SeriesIndex::open(&path).unwrap();
            let n = index.snapshot().unwrap().series_count();
            for (i, k) in keys.iter().enumerate().take(n as usize) {
                assert_eq!(
                    index.lookup(k).unwrap(),
                    Some((SeriesId(i as u32), Kind::ALL[i % 3]))
                );
            }
            let id = index.get_or_create(&key("new"), Kind::Text).unwrap();
            assert_eq!(id, SeriesId(n));
            drop(index);
            let again = SeriesIndex::open(&path).unwrap();
            assert_eq!(again.lookup(&key("new")).unwrap(), Some((id, Kind::Text)));
        }
        // Zero-filled tail (a crash after the size grew but before data landed).
        let mut zeros = full.clone();
        zeros.extend_from_slice(&[0u8; 64]);
        std::fs::write(&path, &zeros).unwrap();
        assert_eq!(
            SeriesIndex::open(&path)
                .unwrap()
                .snapshot()
                .unwrap()
                .series_count(),
            20
        );
        assert_eq!(std::fs::read(&path).unwrap(), full);
    }

    #[test]
    fn refusals_past_the_limit_take_only_the_read_lock() {
        const NEW_MAX: u64 = 3;
        let index = SeriesIndex::in_memory();
        index
            .set_limits(CardinalityOptions {
                source_series_new_per_minute_max: NEW_MAX,
                ..CardinalityOptions::UNLIMITED
            })
            .unwrap();
        let texts: Vec<String> = (0..3 * KEYS_PER_LOCK_MAX)
            .map(|i| format!("flood|ST[f:f{i}]"))
            .collect();
        let first = index
            .resolve_limited(&batch(&texts[..8]), "a", crate::cardinality::wall_ms())
            .unwrap();
        assert_eq!(
            first
                .iter()
                .filter(|r| matches!(r, Resolved::Id(_)))
                .count(),
            NEW_MAX as usize
        );
        // Another reader holds the read lock while the rest resolve: were a refusal to take
        // the write lock, the resolve would wait for the reader, which waits for it.
        let (tx, rx) = std::sync::mpsc::channel();
        let index = &index;
        let resolved = std::thread::scope(|scope| {
            let reader = index.read().unwrap();
            let writer = scope.spawn(|| {
                let resolved = index
                    .resolve_limited(&batch(&texts), "a", crate::cardinality::wall_ms())
                    .unwrap();
                tx.send(()).unwrap();
                resolved
            });
            let done = rx.recv_timeout(std::time::Duration::from_secs(60));
            drop(reader);
            assert!(done.is_ok(), "the refusals waited for the write lock");
            writer.join().unwrap()
        });
        let refused = texts.len() - NEW_MAX as usize;
        assert!(resolved[NEW_MAX as usize..]
            .iter()
            .all(|r| *r == Resolved::Refused(CardinalityLimit::SourceNewPerMinute)));
        let stats = index.cardinality_stats().unwrap().unwrap();
        // The first call's five refusals, then each of the rest once.
        assert_eq!(stats.refused_total[2], 5 + refused as u64);
        assert_eq!(index.snapshot().unwrap().series_count(), NEW_MAX as u32);
    }

    fn batch(texts: &[String]) -> Vec<(KeyRef<'_>, Kind)> {
        texts
            .iter()
            .map(|t| (KeyRef::Text(t.as_str()), Kind::Numeric))
            .collect()
    }

    #[test]
    fn series_created_together_share_a_compressed_record_and_survive_any_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("series.idx");
        let texts: Vec<String> = (0..300)
            .map(|i| {
                format!(
                    "cpu_{}|ST[dc:east,host:h{},rack:r{}]",
                    i % 10,
                    i / 10,
                    i / 50
                )
            })
            .collect();
        {
            let index = SeriesIndex::open(&path).unwrap();
            index.get_or_create(&key("first"), Kind::Text).unwrap();
            // A text repeated within the batch is one new series.
            let mut twice = texts[..100].to_vec();
            twice.push(texts[5].clone());
            let ids = index.resolve(&batch(&twice)).unwrap();
            assert_eq!(ids[100], ids[5]);
            let ids = index.resolve(&batch(&texts)).unwrap();
            assert_eq!(ids[299], SeriesId(300));
            index.sync().unwrap();
        }
        let full = std::fs::read(&path).unwrap();
        let plain: usize = texts.iter().map(|t| 14 + t.len()).sum();
        assert!(
            full.len() * 3 < plain,
            "{} bytes vs {plain} as single records",
            full.len()
        );
        let reopened = SeriesIndex::open(&path).unwrap();
        for (i, t) in texts.iter().enumerate() {
            assert_eq!(
                reopened.lookup(&key(t)).unwrap(),
                Some((SeriesId(i as u32 + 1), Kind::Numeric))
            );
        }
        drop(reopened);
        // Every cut: whole groups survive or none of a group does, and appends continue.
        for cut in (INDEX_HEADER_SIZE_BYTES..full.len()).step_by(3) {
            std::fs::write(&path, &full[..cut]).unwrap();
            let index = SeriesIndex::open(&path).unwrap();
            let n = index.snapshot().unwrap().series_count();
            assert!([0, 1, 101, 301].contains(&n), "cut {cut}: {n} series");
            let id = index.get_or_create(&key("new"), Kind::Text).unwrap();
            assert_eq!(id, SeriesId(n));
        }
    }

    #[test]
    fn every_bit_flip_of_a_group_record_is_caught() {
        let texts: Vec<String> = (0..6).map(|i| format!("m|ST[h:{i}]")).collect();
        let entries: Vec<(u32, &str, Kind)> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u32, t.as_str(), Kind::Numeric))
            .collect();
        let mut file = header_bytes().to_vec();
        file.extend(encode_records(&entries));
        // A second record after the group, so damage in the group is not a torn tail.
        file.extend(encode_records(&[(6, "after", Kind::Text)]));
        let mut inner = Inner::default();
        let size = file.len() as u64;
        assert_eq!(
            replay(Path::new("x"), &mut file.as_slice(), size, &mut inner).unwrap(),
            size
        );
        assert_eq!(inner.series.len(), 7);
        let group_end = file.len() - encode_records(&[(6, "after", Kind::Text)]).len();
        for byte in INDEX_HEADER_SIZE_BYTES..group_end {
            for bit in 0..8 {
                let mut bad = file.clone();
                bad[byte] ^= 1 << bit;
                let mut inner = Inner::default();
                match replay(Path::new("x"), &mut bad.as_slice(), size, &mut inner) {
                    // A flipped size can make the rest look like a torn tail: only a prefix.
                    Ok(good) => assert!(good < size && inner.series.len() < 7, "{byte}.{bit}"),
                    Err(IndexError::Corrupt { .. }) => {}
                    Err(e) => panic!("{byte}.{bit}: {e:?}"),
                }
                inner.assert_invariants();
            }
        }
    }

    #[test]
    fn damage_before_the_tail_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("series.idx");
        {
            let index = SeriesIndex::open(&path).unwrap();
            for i in 0..5 {
                index
                    .get_or_create(&key(&format!("m{i}")), Kind::Numeric)
                    .unwrap();
            }
        }
        let full = std::fs::read(&path).unwrap();
        let mut damaged = full.clone();
        damaged[INDEX_HEADER_SIZE_BYTES + 9] ^= 0x40;
        std::fs::write(&path, &damaged).unwrap();
        let err = SeriesIndex::open(&path).err().unwrap();
        assert!(
            matches!(err, IndexError::Corrupt { offset: 16, .. }),
            "{err:?}"
        );
        let mut header = full.clone();
        header[0] = b'X';
        std::fs::write(&path, &header).unwrap();
        assert!(matches!(
            SeriesIndex::open(&path),
            Err(IndexError::BadHeader { .. })
        ));
    }

    proptest! {
        #[test]
        fn replay_of_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut with_header = header_bytes().to_vec();
            with_header.extend_from_slice(&bytes);
            let mut inner = Inner::default();
            let _ = replay(Path::new("x"), &mut bytes.as_slice(), bytes.len() as u64, &mut inner);
            let mut inner = Inner::default();
            let size_bytes = with_header.len() as u64;
            if let Ok(good) = replay(Path::new("x"), &mut with_header.as_slice(), size_bytes, &mut inner) {
                prop_assert!(good <= size_bytes);
                inner.assert_invariants();
            }
        }

        #[test]
        fn postings_match_keys(names in proptest::collection::vec(("[ab]", proptest::collection::vec(("[xyz]", "[12]"), 0..3)), 1..30)) {
            let index = SeriesIndex::in_memory();
            let mut keys = Vec::new();
            for (name, tags) in names {
                let k = StreamKey::new(name, tags.into_iter().map(|(c, v)| Tag::new(c, v).unwrap())).unwrap();
                let id = index.get_or_create(&k, Kind::Numeric).unwrap();
                if id.0 as usize == keys.len() { keys.push(k); }
            }
            let snap = index.snapshot().unwrap();
            for category in snap.categories(usize::MAX).unwrap() {
                for (value, n) in snap.values(&category, usize::MAX).unwrap() {
                    let want = keys.iter().filter(|k| k.tags().iter().any(|t| t.category() == category && t.value() == value)).count();
                    prop_assert_eq!(n, want as u64);
                }
            }
        }
    }
}
