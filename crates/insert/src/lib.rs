//! Parsed data into the store. [`Insert`] is the [`ingest::Sink`] every protocol's parse writes
//! through in `strata serve`: each sample goes straight into a `store::WriteBatch` under its
//! canonical key (printed from what the parser lends, once per tag list, plus the body's extra
//! tags such as httptrap's `__check`) or, for a series the [`SeriesCache`] knows by the bytes
//! the client sent for it, under its series id, the key neither printed nor looked up. Bins lent
//! sorted or packed are packed into the batch as they are. What the store would refuse (a bad
//! key, a value of another kind within the batch) is rejected naming the key; the parser's own
//! rejections are listed with it, in body order. The within-batch mode-combining rule
//! (`combine.rs`) applies when a body needs it: [`insert`] reads such a body again with the
//! combining sink.
//!
//! Nothing here writes: what a body became ([`Inserted`]) goes to the one function of the
//! server that writes it, which then learns the new series' ids ([`Inserted::learn`]).
#![forbid(unsafe_code)]

mod combine;
pub mod ids;
mod keys;
pub mod statsd;

use ingest::{
    HistogramRef, Known, Lookup, Mode, Point, PointAt, RawSeries, Reason, Rejection, Scope, Series,
    Sink, ValueRef,
};
use store::index::{Kind, SeriesId};
use store::key::{KeyError, StreamKey, Tag};
use store::{Store, StoreError, WriteBatch};

pub use ids::{Misses, Namespace, Reader, SeriesCache, ENTRIES_MAX_DEFAULT, KEY_BYTES_MAX_DEFAULT};

/// Rejection messages kept per body; the rest are only counted.
pub const REJECTIONS_LISTED_MAX: usize = ingest::REJECTIONS_LISTED_MAX;

/// Samples whose batch is kept for a next body (larger ones are dropped after use, so one huge
/// body does not pin its memory).
const RETAINED_BATCH_SAMPLES_MAX: usize = 100_000;

/// What a body is read with: its receipt time, the tags every key gets, the id cache and the
/// body's namespace in it, and the store that names cached series in messages.
#[derive(Clone, Copy, Default)]
pub struct Setup<'a> {
    pub now_ms: i64,
    pub extra_tags: &'a [Tag],
    pub cache: Option<(&'a SeriesCache, Namespace)>,
    pub names: Option<&'a Store>,
}

/// The buffers one body's batch is built in, kept from one body to the next: a histogram body's
/// batch is about its size, and allocating it afresh per body faulted its pages in every time.
#[derive(Default)]
pub struct Buffers {
    batch: WriteBatch,
    misses: Misses,
}

/// What a body became: the batch to write, the counts and the listed rejections.
#[derive(Default)]
pub struct Inserted {
    pub batch: WriteBatch,
    /// Samples accepted (including `null`s, which are present without a value).
    pub accepted: usize,
    /// Rejections listed, each "where: why", in body order.
    pub rejected: Vec<String>,
    /// Every rejection, listed or not.
    pub rejected_total: usize,
    /// The parse stopped: nothing of the body is to be stored.
    pub stopped: bool,
    /// It stopped at a size bound (samples per batch, decoded size): a 413, not a 400.
    pub stopped_too_large: bool,
    /// The series pushed by key, to cache once the batch is written.
    misses: Misses,
}

impl Inserted {
    /// The rejections as one line for a response body.
    pub fn error_text(&self) -> Option<String> {
        if self.rejected_total == 0 {
            return None;
        }
        let mut text = self.rejected.join("; ");
        let unlisted = self.rejected_total.saturating_sub(self.rejected.len());
        if unlisted > 0 {
            text.push_str(&format!("; and {unlisted} more"));
        }
        Some(text)
    }

    /// Turns what the store refused when writing (a key that exists with another kind) into
    /// rejections.
    pub fn apply_kind_rejections(&mut self, rejected: &[store::KindRejection]) {
        for r in rejected {
            self.accepted = self.accepted.saturating_sub(r.samples);
            for _ in 0..r.samples {
                let message = || {
                    format!(
                        "metric `{}`: is {} and cannot take a {} value",
                        r.key,
                        r.existing.name(),
                        r.requested.name()
                    )
                };
                list(&mut self.rejected, &mut self.rejected_total, message);
            }
        }
    }

    /// After a successful write of the batch: caches the ids of the series it pushed by key
    /// (they all exist now).
    pub fn learn(&mut self, store: &Store, cache: &SeriesCache) {
        self.misses.learn(store, cache);
    }

    /// The buffers, emptied, for the next body (a new batch when this one held more than
    /// `RETAINED_BATCH_SAMPLES_MAX` samples): once written, only the counts and rejections are
    /// read.
    pub fn take_buffers(&mut self) -> Buffers {
        let mut batch = std::mem::take(&mut self.batch);
        if batch.sample_count() > RETAINED_BATCH_SAMPLES_MAX {
            batch = WriteBatch::new();
        }
        batch.clear();
        let mut misses = std::mem::take(&mut self.misses);
        misses.clear();
        Buffers { batch, misses }
    }
}

/// The stream key of a series as a parser lends it (no extra tags): for a consumer that keys
/// its own state by stream, as the statsd aggregator does.
pub fn stream_key(series: &Series<'_>) -> Result<StreamKey, KeyError> {
    let name = series.name.to_string();
    match series.tags {
        ingest::TagsRef::List { tags, .. } => {
            let tags: Result<Vec<Tag>, KeyError> = tags
                .iter()
                .map(|(c, v)| Tag::new(c.as_bytes(), v.as_bytes()))
                .collect();
            StreamKey::new(name, tags?)
        }
        ingest::TagsRef::Suffix(text) => {
            let tags: Result<Vec<Tag>, KeyError> = store::key::suffix::suffix_tags(text)
                .map(|(c, v)| Tag::new(c.as_bytes(), v.as_bytes()))
                .collect();
            StreamKey::new(name, tags?)
        }
        ingest::TagsRef::Labels(labels) => StreamKey::from_labels(labels.iter().copied()),
        ingest::TagsRef::Unread => Err(KeyError::Syntax {
            position: 0,
            expected: "the series' tags (the parser lent none)",
        }),
    }
}

/// A batch made whole by its writer (a statsd interval, self-monitoring): everything in it
/// accepted, nothing to learn.
impl From<WriteBatch> for Inserted {
    fn from(batch: WriteBatch) -> Inserted {
        Inserted {
            accepted: batch.sample_count(),
            batch,
            ..Inserted::default()
        }
    }
}

/// Counts a rejection and lists it while there is room.
fn list(rejected: &mut Vec<String>, total: &mut usize, message: impl FnOnce() -> String) {
    *total += 1;
    if rejected.len() < REJECTIONS_LISTED_MAX {
        rejected.push(message());
    }
}

/// Reads one body with `parse` (a protocol's `parse_into`, given the sink) into a batch. A body
/// that needs numeric values combined (a numeric sample in mode `Accumulate` or `Average`) is
/// read a second time, by the combining sink: rare (httptrap `_fl`, OTLP delta sums), and the
/// first reading stops at the first such sample.
pub fn insert(
    setup: &Setup<'_>,
    buffers: Buffers,
    mut parse: impl FnMut(&mut Insert<'_>),
) -> Inserted {
    let mut sink = Insert::new(setup, buffers, false);
    parse(&mut sink);
    if !sink.restart {
        return sink.finish();
    }
    let buffers = sink.finish().take_buffers();
    let mut sink = Insert::new(setup, buffers, true);
    parse(&mut sink);
    sink.finish()
}

/// The sink: one body into a store batch.
pub struct Insert<'a> {
    now_ms: i64,
    out: Inserted,
    /// For each listed rejection, whether the parser made it (the others are the sink's own,
    /// about keys, dropped when the parse stops: nothing is stored then).
    by_parser: Vec<bool>,
    parser_total: usize,
    keys: keys::Keys<'a>,
    /// The id cache, read under one shared lock for the whole body; `None` when combining.
    cache: Option<Reader<'a>>,
    names: Option<&'a Store>,
    /// Scratch for the key being pushed.
    key: String,
    /// The series announced last ([`Sink::series`]).
    current: Current,
    /// Numeric values combined per stream and timestamp (`Some`: the combining sink).
    slots: Option<combine::Slots>,
    /// A sample needs combining: this reading stopped, and the body is read again.
    restart: bool,
}

/// The series announced last, whose points follow.
#[derive(Default)]
struct Current {
    index: Option<usize>,
    /// Its id when the cache knows it, else its key is in `current_key`.
    id: Option<SeriesId>,
    key: String,
    /// The batch slot of its numeric samples once one is pushed.
    slot: Option<usize>,
    /// Pushed by key and not yet remembered as a miss.
    miss_pending: bool,
}

/// A value as the batch takes it: owned, or bins lent sorted or packed.
enum Value<'v> {
    Owned(store::Value),
    Bins(&'v [u16], &'v [u64]),
    Packed(hist::packed::PackedRef<'v>),
}

impl Value<'_> {
    fn kind(&self) -> Kind {
        match self {
            Value::Owned(v) => v.kind(),
            Value::Bins(..) | Value::Packed(_) => Kind::Histogram,
        }
    }
}

/// Where a sample goes: a series id, a canonical key, or a slot of this batch.
#[derive(Clone, Copy)]
enum To<'k> {
    Id(SeriesId),
    Key(&'k str),
    Slot(usize),
}

/// Pushes one value; the batch slot it went to.
fn push(
    batch: &mut WriteBatch,
    to: To<'_>,
    ts_ms: i64,
    value: Value<'_>,
) -> Result<usize, StoreError> {
    match (value, to) {
        (Value::Packed(bins), To::Id(id)) => batch.push_id_packed(id, ts_ms, bins),
        (Value::Packed(bins), To::Key(key)) => batch.push_canonical_packed(key, ts_ms, bins),
        (Value::Packed(bins), To::Slot(slot)) => {
            let value = store::Value::Histogram(bins.to_histogram());
            batch.push_at(slot, ts_ms, value).map(|()| slot)
        }
        (Value::Bins(keys, counts), To::Id(id)) => batch.push_id_bins(id, ts_ms, keys, counts),
        (Value::Bins(keys, counts), To::Key(key)) => {
            batch.push_canonical_bins(key, ts_ms, keys, counts)
        }
        (Value::Bins(keys, counts), To::Slot(slot)) => {
            batch.push_at_bins(slot, ts_ms, keys, counts).map(|()| slot)
        }
        (Value::Owned(value), To::Id(id)) => batch.push_id(id, ts_ms, value),
        (Value::Owned(value), To::Key(key)) => batch.push_canonical(key, ts_ms, value),
        (Value::Owned(value), To::Slot(slot)) => batch.push_at(slot, ts_ms, value).map(|()| slot),
    }
}

/// The value of a point the batch takes (`None` for a `null`: present, nothing stored).
#[inline]
fn batch_value(value: ValueRef<'_>) -> Option<Value<'_>> {
    Some(match value {
        ValueRef::Null => return None,
        ValueRef::Numeric(v) => Value::Owned(store::Value::Numeric(v)),
        ValueRef::Text(text) => Value::Owned(store::Value::Text(text.to_owned())),
        ValueRef::Histogram(HistogramRef::Packed(bins)) => Value::Packed(bins),
        ValueRef::Histogram(HistogramRef::Sorted { keys, counts }) => Value::Bins(keys, counts),
        ValueRef::Histogram(HistogramRef::Built(h)) => Value::Owned(store::Value::Histogram(h)),
        ValueRef::CumulativeHistogram(h) => {
            Value::Owned(store::Value::CumulativeHistogram(h.into_histogram()))
        }
    })
}

impl<'a> Insert<'a> {
    fn new(setup: &Setup<'a>, buffers: Buffers, combining: bool) -> Insert<'a> {
        debug_assert!(buffers.batch.is_empty(), "an empty batch");
        // The combining sink prints every key: a series pushed by id in one sample and by
        // key in another would not combine.
        let cache = match setup.cache {
            Some((cache, namespace)) if !combining => Some(cache.reader(namespace)),
            _ => None,
        };
        Insert {
            now_ms: setup.now_ms,
            out: Inserted {
                batch: buffers.batch,
                misses: buffers.misses,
                ..Inserted::default()
            },
            by_parser: Vec::new(),
            parser_total: 0,
            keys: keys::Keys::new(setup.extra_tags),
            cache,
            names: setup.names,
            key: String::new(),
            current: Current::default(),
            slots: combining.then(combine::Slots::default),
            restart: false,
        }
    }

    /// What the body became (the cache's lock released).
    pub fn finish(mut self) -> Inserted {
        self.cache = None;
        if self.out.stopped {
            // Nothing of a body whose parse stopped is stored, and only the parser's
            // rejections are told: the sink's are about samples nobody will store.
            self.out.batch.clear();
            self.out.misses.clear();
            self.out.accepted = 0;
            let mut by_parser = self.by_parser.iter();
            self.out
                .rejected
                .retain(|_| by_parser.next().copied().unwrap_or(true));
            self.out.rejected_total = self.parser_total;
            return self.out;
        }
        if let Some(mut slots) = self.slots.take() {
            for (key, ts_ms, value) in slots.drain() {
                let pushed =
                    self.out
                        .batch
                        .push_canonical(&key, ts_ms, store::Value::Numeric(value));
                if let Err(e) = pushed {
                    self.out.accepted = self.out.accepted.saturating_sub(1);
                    self.reject_own(|| format!("metric `{key}`: {e}"));
                }
            }
        }
        self.out
    }

    /// A rejection of the sink's own (the store would refuse the sample).
    fn reject_own(&mut self, message: impl FnOnce() -> String) {
        if self.out.rejected.len() < REJECTIONS_LISTED_MAX {
            self.by_parser.push(false);
        }
        list(
            &mut self.out.rejected,
            &mut self.out.rejected_total,
            message,
        );
    }

    /// The id of a series the cache knows, asked by the parser or looked up here.
    #[inline]
    fn id_of(&mut self, series: &Series<'_>) -> Option<SeriesId> {
        match series.lookup {
            Lookup::Known(known) => u32::try_from(known.0).ok().map(SeriesId),
            Lookup::Unknown => None,
            Lookup::NotAsked => self.cache.as_mut()?.get(series.raw?),
        }
    }

    /// The canonical key of a series known by id (for messages only).
    fn key_of(&self, id: SeriesId) -> String {
        self.names
            .and_then(|store| store.index().key_text(id).ok().flatten())
            .unwrap_or_else(|| format!("series id {}", id.0))
    }

    /// Why the store would refuse a series' key, naming the series as its protocol does.
    fn reject_key(&mut self, series: &Series<'_>, e: KeyError) {
        let name = series.name;
        match series.index {
            Some(index) => self.reject_own(|| format!("series {index} (`{name}`): {e}")),
            None => self.reject_own(|| format!("metric `{name}`: {e}")),
        }
    }

    /// Remembers that `raw` was pushed as the key `text`, to cache its id after the write.
    fn miss(&mut self, raw: Option<RawSeries<'_>>, text: &str, kind: Kind) {
        if let (Some(raw), Some(cache)) = (raw, &self.cache) {
            self.out.misses.add(&cache.key(raw), text, kind);
        }
    }

    /// A sample of a series the parser did not announce.
    fn sample_alone(&mut self, series: &Series<'_>, ts_ms: i64, value: Value<'_>) {
        if let Some(id) = self.id_of(series) {
            match push(&mut self.out.batch, To::Id(id), ts_ms, value) {
                Ok(_) => self.out.accepted += 1,
                Err(e) => {
                    let key = self.key_of(id);
                    self.reject_own(|| format!("metric `{key}`: {e}"));
                }
            }
            return;
        }
        let mut key = std::mem::take(&mut self.key);
        key.clear();
        match self.keys.write(series, &mut key) {
            Err(e) => self.reject_key(series, e),
            Ok(()) => {
                let kind = value.kind();
                match push(&mut self.out.batch, To::Key(&key), ts_ms, value) {
                    Ok(_) => {
                        self.out.accepted += 1;
                        self.miss(series.raw, &key, kind);
                    }
                    Err(e) => self.reject_own(|| format!("metric `{key}`: {e}")),
                }
            }
        }
        self.key = key;
    }

    /// A sample of the series announced last.
    fn sample_of_current(&mut self, series: &Series<'_>, ts_ms: i64, value: Value<'_>) {
        let numeric = matches!(value, Value::Owned(store::Value::Numeric(_)));
        let to = match (self.current.slot, self.current.id) {
            (Some(slot), _) if numeric => To::Slot(slot),
            (_, Some(id)) => To::Id(id),
            (_, None) => To::Key(&self.current.key),
        };
        let kind = value.kind();
        match push(&mut self.out.batch, to, ts_ms, value) {
            Ok(slot) => {
                self.out.accepted += 1;
                if numeric {
                    self.current.slot = Some(slot);
                }
                if std::mem::take(&mut self.current.miss_pending) {
                    let key = std::mem::take(&mut self.current.key);
                    self.miss(series.raw, &key, kind);
                    self.current.key = key;
                }
            }
            Err(e) => {
                let key = match self.current.id {
                    Some(id) => self.key_of(id),
                    None => self.current.key.clone(),
                };
                self.reject_own(|| format!("metric `{key}`: {e}"));
            }
        }
    }

    /// A numeric sample under the combining rule (the combining sink), or the signal to read
    /// the body again with it.
    fn combine(&mut self, series: &Series<'_>, ts_ms: i64, value: f64, mode: Mode) -> bool {
        if self.slots.is_none() {
            self.restart = true;
            return false;
        }
        let announced = series.index.is_some() && series.index == self.current.index;
        let mut key = std::mem::take(&mut self.key);
        key.clear();
        let written = match announced {
            true => {
                key.push_str(&self.current.key);
                Ok(())
            }
            false => self.keys.write(series, &mut key),
        };
        match written {
            Err(e) => self.reject_key(series, e),
            Ok(()) => {
                if let Some(slots) = &mut self.slots {
                    slots.add(&key, ts_ms, value, mode);
                }
                self.out.accepted += 1;
            }
        }
        self.key = key;
        true
    }
}

impl Sink for Insert<'_> {
    fn document(&mut self, _index: usize, _metrics: usize) {
        self.keys.document();
    }

    #[inline]
    fn known_series(&mut self, raw: RawSeries<'_>) -> Option<Known> {
        let id = self.cache.as_mut()?.get(raw)?;
        Some(Known(u64::from(id.0)))
    }

    fn series(&mut self, series: &Series<'_>) -> bool {
        let mut key = std::mem::take(&mut self.current.key);
        key.clear();
        self.current = Current {
            index: series.index,
            ..Current::default()
        };
        let id = match self.slots {
            Some(_) => None,
            None => self.id_of(series),
        };
        let ok = match id {
            Some(id) => {
                self.current.id = Some(id);
                true
            }
            None => match self.keys.write(series, &mut key) {
                Ok(()) => {
                    self.current.miss_pending = true;
                    true
                }
                Err(e) => {
                    self.reject_key(series, e);
                    false
                }
            },
        };
        self.current.key = key;
        ok
    }

    #[inline]
    fn sample(&mut self, series: &Series<'_>, point: Point<'_>) -> bool {
        let Point { ts_ms, value, mode } = point;
        let ts_ms = ts_ms.unwrap_or(self.now_ms);
        if let ValueRef::Numeric(v) = value {
            if mode != Mode::Set || self.slots.is_some() {
                return self.combine(series, ts_ms, v, mode);
            }
        }
        let Some(value) = batch_value(value) else {
            // Present without a value: counted, nothing stored.
            self.out.accepted += 1;
            return true;
        };
        if series.index.is_some() && series.index == self.current.index {
            self.sample_of_current(series, ts_ms, value);
        } else {
            self.sample_alone(series, ts_ms, value);
        }
        true
    }

    fn reject(&mut self, location: &dyn Fn() -> String, reason: Reason, scope: Scope) {
        if scope == Scope::Whole {
            // What was handed over before is dropped with the body.
            self.out.rejected.clear();
            self.by_parser.clear();
            self.out.rejected_total = 0;
            self.parser_total = 0;
        }
        let stop = scope != Scope::One;
        if stop {
            self.out.stopped = true;
            self.out.stopped_too_large |= matches!(reason, Reason::Bound { .. });
        }
        self.parser_total += 1;
        self.out.rejected_total += 1;
        // A stopping rejection is always listed: the status depends on it.
        if self.out.rejected.len() < REJECTIONS_LISTED_MAX || stop {
            let rejection = Rejection {
                location: location(),
                reason,
                rest_of_body: stop,
            };
            self.out.rejected.push(rejection.to_string());
            self.by_parser.push(true);
        }
    }

    fn reject_point(&mut self, series: &Series<'_>, at: PointAt, reason: Reason) {
        let index = series.index.unwrap_or(0);
        let name = match (series.lookup, self.current.id) {
            // Its labels were not read: the name from its key.
            (Lookup::Known(_), Some(id)) => {
                let key = self.key_of(id);
                match StreamKey::parse(&key) {
                    Ok(parsed) => parsed.name().to_owned(),
                    Err(_) => key,
                }
            }
            _ => series.name.to_string(),
        };
        self.reject(&|| at.location(index, &name), reason, Scope::One);
    }
}

#[cfg(test)]
mod tests;
