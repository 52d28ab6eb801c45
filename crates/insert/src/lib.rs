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
use store::key::{KeyError, StreamKey, Tag};
use store::{Kind, SeriesId};
use store::{Store, StoreError, WriteBatch};

pub use ids::{Misses, Namespace, Reader, SeriesCache, ENTRIES_MAX_DEFAULT};

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
    /// The first series a cardinality limit refused, and the limit (the answer names both).
    pub limited: Option<(store::CardinalityLimit, String)>,
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

    /// Turns the new series a cardinality limit refused into rejections naming the limit.
    pub fn apply_cardinality_refusals(&mut self, refused: &[store::CardinalityRefusal]) {
        for r in refused {
            if self.limited.is_none() {
                self.limited = Some((r.limit, r.key.clone()));
            }
            self.accepted = self.accepted.saturating_sub(r.samples);
            for _ in 0..r.samples {
                let message = || {
                    format!(
                        "metric `{}`: new series refused: cardinality.{} ({}) reached",
                        r.key,
                        r.limit.name(),
                        r.max
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
    /// The id cache, read under its shared lock (let go every few thousand lookups); `None`
    /// when combining.
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

/// Where a sample goes: a series id, a canonical key, or a slot of this batch.
#[derive(Clone, Copy)]
enum To<'k> {
    Id(SeriesId),
    Key(&'k str),
    Slot(usize),
}

/// The kind of series a value makes (`None` for a `null`).
fn kind_of(value: &ValueRef<'_>) -> Option<Kind> {
    match value {
        ValueRef::Null => None,
        ValueRef::Numeric(_) => Some(Kind::Numeric),
        ValueRef::Text(_) => Some(Kind::Text),
        ValueRef::Histogram(_) | ValueRef::CumulativeHistogram(_) | ValueRef::Cumulative(_) => {
            Some(Kind::Histogram)
        }
    }
}

/// Pushes one value with the batch's method for its form (bins lent sorted or packed go in
/// as they are); the batch slot it went to, `None` for a `null` (present without a value:
/// nothing stored). Inlined where `to` and the value are known, so that their matches fold.
#[inline(always)]
fn push(
    batch: &mut WriteBatch,
    to: To<'_>,
    ts_ms: i64,
    value: ValueRef<'_>,
) -> Option<Result<usize, StoreError>> {
    let owned = match value {
        ValueRef::Null => return None,
        ValueRef::Histogram(HistogramRef::Packed(bins)) => {
            return Some(match to {
                To::Id(id) => batch.push_id_packed(id, ts_ms, bins),
                To::Key(key) => batch.push_canonical_packed(key, ts_ms, bins),
                To::Slot(slot) => {
                    let value = store::Value::Histogram(bins.to_histogram());
                    batch.push_at(slot, ts_ms, value).map(|()| slot)
                }
            })
        }
        ValueRef::Histogram(HistogramRef::Sorted { keys, counts }) => {
            return Some(match to {
                To::Id(id) => batch.push_id_bins(id, ts_ms, keys, counts),
                To::Key(key) => batch.push_canonical_bins(key, ts_ms, keys, counts),
                To::Slot(slot) => batch.push_at_bins(slot, ts_ms, keys, counts).map(|()| slot),
            })
        }
        ValueRef::Numeric(v) => store::Value::Numeric(v),
        ValueRef::Text(text) => store::Value::Text(text.to_owned()),
        ValueRef::Histogram(HistogramRef::Built(h)) => store::Value::Histogram(h),
        ValueRef::CumulativeHistogram(h) => {
            store::Value::CumulativeHistogram(hist::convert::Cumulative::Bins(h.into_histogram()))
        }
        ValueRef::Cumulative(c) => store::Value::CumulativeHistogram(c),
    };
    Some(match to {
        To::Id(id) => batch.push_id(id, ts_ms, owned),
        To::Key(key) => batch.push_canonical(key, ts_ms, owned),
        To::Slot(slot) => batch.push_at(slot, ts_ms, owned).map(|()| slot),
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
    fn finish(mut self) -> Inserted {
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
    #[inline(always)]
    fn id_of(&mut self, series: &Series<'_>) -> Option<SeriesId> {
        match series.lookup {
            // The token is this sink's own, made from a series id.
            Lookup::Known(known) => Some(SeriesId(known.0 as u32)),
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

    /// A sample the batch refused, of a series pushed by id or of the announced series.
    #[cold]
    fn reject_pushed(&mut self, id: Option<SeriesId>, e: StoreError) {
        let key = match id {
            Some(id) => self.key_of(id),
            None => self.current.key.clone(),
        };
        self.reject_own(|| format!("metric `{key}`: {e}"));
    }

    /// Remembers that `raw` was pushed as the key `text`, to cache its id after the write.
    fn miss(&mut self, raw: Option<RawSeries<'_>>, text: &str, kind: Option<Kind>) {
        if let (Some(raw), Some(cache), Some(kind)) = (raw, &self.cache, kind) {
            self.out.misses.add(&cache.key(raw), text, kind);
        }
    }

    /// A sample of a series known by id, or of the announced series (`announced`: its numeric
    /// samples after the first go to the first's batch slot).
    #[inline(always)]
    fn push_known(&mut self, to: To<'_>, announced: bool, ts_ms: i64, value: ValueRef<'_>) {
        let numeric = matches!(value, ValueRef::Numeric(_));
        match push(&mut self.out.batch, to, ts_ms, value) {
            None => self.out.accepted += 1,
            Some(Ok(slot)) => {
                self.out.accepted += 1;
                if announced && numeric {
                    self.current.slot = Some(slot);
                }
            }
            Some(Err(e)) => {
                let id = match to {
                    To::Id(id) => Some(id),
                    _ => self.current.id,
                };
                self.reject_pushed(id, e);
            }
        }
    }

    /// A sample pushed by its canonical key: printed here, or the announced series'.
    fn push_by_key(
        &mut self,
        series: &Series<'_>,
        announced: bool,
        ts_ms: i64,
        value: ValueRef<'_>,
    ) {
        let kind = kind_of(&value);
        let numeric = matches!(value, ValueRef::Numeric(_));
        let mut key = match announced {
            true => std::mem::take(&mut self.current.key),
            false => {
                let mut key = std::mem::take(&mut self.key);
                key.clear();
                if let Err(e) = self.keys.write(series, &mut key) {
                    self.reject_key(series, e);
                    self.key = key;
                    return;
                }
                key
            }
        };
        match push(&mut self.out.batch, To::Key(&key), ts_ms, value) {
            None => self.out.accepted += 1,
            Some(Ok(slot)) => {
                self.out.accepted += 1;
                if announced && numeric {
                    self.current.slot = Some(slot);
                }
                if !announced || std::mem::take(&mut self.current.miss_pending) {
                    self.miss(series.raw, &key, kind);
                }
            }
            Some(Err(e)) => self.reject_own(|| format!("metric `{key}`: {e}")),
        }
        match announced {
            true => self.current.key = std::mem::take(&mut key),
            false => self.key = key,
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

    #[inline(always)]
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

    // Always inlined into the parser's loop: there the parser's own match has already told which
    // value it is, and most of this folds away (called, it cost Influx 100 instructions a
    // sample in moves and matches).
    #[inline(always)]
    fn sample(&mut self, series: &Series<'_>, point: Point<'_>) -> bool {
        let Point { ts_ms, value, mode } = point;
        let ts_ms = ts_ms.unwrap_or(self.now_ms);
        match value {
            // Present without a value: counted, nothing stored (whatever its key).
            ValueRef::Null => {
                self.out.accepted += 1;
                return true;
            }
            ValueRef::Numeric(v) if mode != Mode::Set || self.slots.is_some() => {
                return self.combine(series, ts_ms, v, mode);
            }
            _ => {}
        }
        let announced = series.index.is_some() && series.index == self.current.index;
        let to = match announced {
            true => match (self.current.slot, self.current.id) {
                (Some(slot), _) if matches!(value, ValueRef::Numeric(_)) => Some(To::Slot(slot)),
                (_, id) => id.map(To::Id),
            },
            false => self.id_of(series).map(To::Id),
        };
        match to {
            Some(to) => self.push_known(to, announced, ts_ms, value),
            None => self.push_by_key(series, announced, ts_ms, value),
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
