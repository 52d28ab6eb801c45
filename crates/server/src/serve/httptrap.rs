//! httptrap bodies, JSON or flatbuffer metric lists, straight into a store batch: the body is
//! read with `ingest::httptrap::visit` or `ingest::flat::visit`, which lend each metric's name
//! and text from the body (or the walk's path), each tag list once per `tags_id` and histogram
//! bins as storage-order keys and counts. A tag list (plus the request's `__check` tag) is
//! checked and printed once per `tags_id` (`TagSet`), each metric's canonical key printed from it
//! into the batch. No `ingest::Sample`, name copy or tag list is made per metric.
//!
//! The response is exactly what `mapping::map_batch` makes of the encoding's `parse`: the same
//! accepted count, the same rejections in the same order (parser's first, then the mapping's),
//! nothing stored when the parse stopped. A body with a numeric metric in mode `Accumulate` or
//! `Average` (values combined per stream and timestamp within the batch) is handed to that path
//! instead, which implements the combining rule.

use std::cell::RefCell;
use std::sync::Arc;

use ingest::httptrap::Scratch;
use ingest::visit::{HistogramRef, Metric, ValueRef, Visitor};
use ingest::{Mode, Options, Reason, Rejection};
use store::key::{CanonicalTags, Tag, TagSet};
use store::WriteBatch;

use super::idcache::{Misses, Reader, SeriesCache};
use super::kept::Kept;
use super::mapping::{self, Mapped, REJECTIONS_LISTED_MAX};
use super::{now_ms, unzipped, App, Endpoint, WriteError};

/// Flatbuffers `tags_id`s below this are tag sets (0 = no tags), kept in a vector per document;
/// the reader's ids for names' suffix tags lie above.
const TAG_SET_IDS_MAX: u64 = ingest::flat::TAG_SETS_PER_DOCUMENT_MAX as u64 + 1;

/// The two encodings of an httptrap body, chosen by `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Flat,
}

impl Encoding {
    /// `tags_id`s below this are kept per document in a vector; the others one at a time (the
    /// last one seen). JSON ids never come back once another followed, so the last one is all
    /// there is to keep.
    fn set_ids_max(self) -> u64 {
        match self {
            Encoding::Json => 0,
            Encoding::Flat => TAG_SET_IDS_MAX,
        }
    }

    /// The owned parse the visit stands for.
    fn parse(self, body: &[u8], options: &Options) -> ingest::Batch {
        match self {
            Encoding::Json => ingest::httptrap::parse(body, options),
            Encoding::Flat => ingest::flat::parse(body, options),
        }
    }
}

/// Decompresses (gzip if sent so), decodes, maps and writes one httptrap body; returns what it
/// became. A body whose parse stopped is not written at all.
pub async fn ingest(
    app: &Arc<App>,
    encoding: Encoding,
    body: impl AsRef<[u8]> + Send + 'static,
    gzip: bool,
    extra_tags: Vec<Tag>,
) -> Result<Mapped, WriteError> {
    app.write_blocking(move |app| write_body(app, encoding, body.as_ref(), gzip, &extra_tags))
        .await
}

/// Bytes of reading buffers kept for a next body (larger ones are dropped after use, so one huge
/// body does not pin its memory; the batch's bound is `Mapped::take_batch_to_keep`'s).
const RETAINED_SCRATCH_BYTES_MAX: usize = 32 << 20;

thread_local! {
    /// A blocking-pool thread's batch, kept between bodies: a histogram body's batch is about
    /// its size, and allocating it afresh per body faulted its pages in every time.
    static BUFFERS: RefCell<(WriteBatch, Misses)> = RefCell::new(Default::default());
}

/// The JSON reading buffers (bin vectors, tape, remembered bin prefixes and key splits), taken
/// only while a body is read.
static SCRATCH: Kept<Scratch> = Kept::new();

fn write_body(
    app: &App,
    encoding: Encoding,
    body: &[u8],
    gzip: bool,
    extra_tags: &[Tag],
) -> Result<Mapped, WriteError> {
    let bytes = unzipped(body, gzip, app.config.limits.body_size_bytes_max)?;
    let (batch, mut misses) = BUFFERS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let mut scratch = SCRATCH.take();
    let cache = &app.series_ids.httptrap;
    let reading = Reading {
        scratch: &mut scratch,
        cache,
        misses: &mut misses,
    };
    let mut mapped = map_body_with(encoding, &bytes, now_ms(), extra_tags, batch, reading);
    if scratch.capacity_bytes() <= RETAINED_SCRATCH_BYTES_MAX {
        SCRATCH.give(scratch);
    }
    let result = app.store_mapped(Endpoint::Httptrap, &mut mapped);
    if result.is_ok() && !mapped.stopped {
        // The series pushed by key exist now: their ids are learned for the next bodies.
        misses.learn(&app.store, cache);
    }
    misses.clear();
    let batch = mapped.take_batch_to_keep();
    BUFFERS.with(|b| *b.borrow_mut() = (batch, misses));
    result.map(|()| mapped)
}

/// One httptrap body in `encoding` as a store batch plus its rejections (not written yet);
/// `extra_tags` go on every metric (httptrap's `__check`).
#[cfg(test)]
fn map_body(encoding: Encoding, body: &[u8], now_ms: i64, extra_tags: &[Tag]) -> Mapped {
    let batch = WriteBatch::new();
    let cache = SeriesCache::new(1 << 10, 1 << 20);
    let reading = Reading {
        scratch: &mut Scratch::default(),
        cache: &cache,
        misses: &mut Misses::default(),
    };
    map_body_with(encoding, body, now_ms, extra_tags, batch, reading)
}

/// What reading a body borrows from its caller: the reading buffers, the series id cache and
/// the list of series pushed by key (to learn once the batch is written).
struct Reading<'r> {
    scratch: &'r mut Scratch,
    cache: &'r SeriesCache,
    misses: &'r mut Misses,
}

/// [`map_body`] into `batch` (empty on entry), reading with the caller's buffers and cache.
fn map_body_with(
    encoding: Encoding,
    body: &[u8],
    now_ms: i64,
    extra_tags: &[Tag],
    batch: WriteBatch,
    reading: Reading<'_>,
) -> Mapped {
    debug_assert_eq!(batch.sample_count(), 0, "an empty batch");
    let options = Options::at(now_ms);
    let Reading {
        scratch,
        cache,
        misses,
    } = reading;
    let mut writer = BatchWriter::new(now_ms, extra_tags, encoding.set_ids_max(), cache, misses);
    writer.mapped.batch = batch;
    match encoding {
        Encoding::Json => ingest::httptrap::visit_with(body, &options, &mut writer, scratch),
        Encoding::Flat => ingest::flat::visit(body, &options, &mut writer),
    }
    if writer.combining {
        // Rare (statsd-like counters, `_fl` in JSON): the owned path combines modes, and
        // nothing this visit pushed is written.
        writer.misses.clear();
        return mapping::map_batch(encoding.parse(body, &options), now_ms, extra_tags);
    }
    writer.finish()
}

/// The visitor: metrics pushed into `mapped.batch` under keys printed from per-document tag
/// sets; rejections kept in two lists so they come out in `map_batch`'s order.
struct BatchWriter<'t> {
    now_ms: i64,
    /// Series ids by the check's tags and a metric's name, then its lent `|ST[…]` text: a
    /// series seen before is pushed by id, its key neither printed nor looked up. Read for
    /// the whole body.
    cache: Reader<'t>,
    /// The series pushed by key, learned into the cache once the batch is written.
    misses: &'t mut Misses,
    /// The cache key's first part: the check's tags (length-prefixed, so no two lists read
    /// alike) and then the metric's name, rewritten per metric after `cache_prefix_len`.
    cache_first: Vec<u8>,
    cache_prefix_len: usize,
    extra_tags: &'t [Tag],
    /// `extra_tags` as text (the check name comes from the URL, so they are): lent suffixes'
    /// keys are printed with them without checking their bytes as UTF-8 per key.
    extra_text: Option<Vec<(&'t str, &'t str)>>,
    /// `extra_tags` sorted, when every part is literal: a lent suffix already in canonical
    /// order is merged with them in one pass (`store::key::write_key_with_canonical_tags`).
    extra_canonical: Option<CanonicalTags<'t>>,
    /// `tags_id`s below this are kept in `sets`, the others in `other_set`.
    set_ids_max: u64,
    mapped: Mapped,
    /// The parser's rejections (as `ingest::Batch` keeps them: the first
    /// `REJECTIONS_LISTED_MAX`, plus a stopping one), and their count.
    parse_rejected: Vec<String>,
    parse_rejected_total: usize,
    /// The mapping's rejections (keys the store would refuse), and their count.
    map_rejected: Vec<String>,
    map_rejected_total: usize,
    /// The current document's tag sets by `tags_id` (with `extra_tags`), built on first use.
    sets: Vec<Option<Result<TagSet, String>>>,
    /// The last tag list with a `tags_id` from `set_ids_max` up (a flatbuffer name's `|ST[…]`
    /// tags, every JSON tag list).
    other_set: Option<(u64, Result<TagSet, String>)>,
    /// Scratch for the canonical key being pushed.
    key: String,
    /// A metric needs modes combined: the visit stopped and the owned path takes over.
    combining: bool,
}

impl<'t> BatchWriter<'t> {
    fn new(
        now_ms: i64,
        extra_tags: &'t [Tag],
        set_ids_max: u64,
        cache: &'t SeriesCache,
        misses: &'t mut Misses,
    ) -> BatchWriter<'t> {
        let as_text = |t: &'t Tag| {
            let category = std::str::from_utf8(t.category()).ok()?;
            Some((category, std::str::from_utf8(t.value()).ok()?))
        };
        let extra_text: Option<Vec<(&str, &str)>> = extra_tags.iter().map(as_text).collect();
        let mut cache_first = Vec::new();
        let parts = extra_tags.iter().flat_map(|t| [t.category(), t.value()]);
        cache_first.extend_from_slice(&(extra_tags.len() as u64).to_le_bytes());
        for part in parts {
            cache_first.extend_from_slice(&(part.len() as u64).to_le_bytes());
            cache_first.extend_from_slice(part);
        }
        BatchWriter {
            now_ms,
            cache: cache.reader(),
            misses,
            cache_prefix_len: cache_first.len(),
            cache_first,
            extra_tags,
            extra_canonical: extra_text
                .as_ref()
                .and_then(|tags| CanonicalTags::new(tags.iter().copied())),
            extra_text,
            set_ids_max,
            mapped: Mapped::default(),
            parse_rejected: Vec::new(),
            parse_rejected_total: 0,
            map_rejected: Vec::new(),
            map_rejected_total: 0,
            sets: Vec::new(),
            other_set: None,
            key: String::new(),
            combining: false,
        }
    }

    fn map_reject(&mut self, message: impl FnOnce() -> String) {
        self.map_rejected_total += 1;
        if self.map_rejected.len() < REJECTIONS_LISTED_MAX {
            self.map_rejected.push(message());
        }
    }

    /// The tag set of a metric's `tags`, with the extra tags, built once per `tags_id` per
    /// document.
    fn tag_set(&mut self, tags_id: u64, tags: &ingest::Tags) -> &Result<TagSet, String> {
        let extra_tags = self.extra_tags;
        let build = || {
            let pairs = tags
                .iter()
                .map(|(c, v)| (c.as_bytes(), v.as_bytes()))
                .chain(extra_tags.iter().map(|t| (t.category(), t.value())));
            TagSet::new(pairs).map_err(|e| e.to_string())
        };
        if tags_id < self.set_ids_max {
            // Bounded by TAG_SET_IDS_MAX entries.
            let at = tags_id as usize;
            if self.sets.len() <= at {
                self.sets.resize(at + 1, None);
            }
            return self.sets[at].get_or_insert_with(build);
        }
        if self
            .other_set
            .as_ref()
            .is_some_and(|(id, _)| *id != tags_id)
        {
            self.other_set = None;
        }
        &self.other_set.get_or_insert_with(|| (tags_id, build())).1
    }

    fn finish(mut self) -> Mapped {
        let mut mapped = self.mapped;
        self.parse_rejected.truncate(REJECTIONS_LISTED_MAX);
        mapped.rejected = self.parse_rejected;
        mapped.rejected_total = self.parse_rejected_total;
        if mapped.stopped {
            // Nothing of a body whose parse stopped is stored or counted as accepted.
            mapped.batch.clear();
            mapped.accepted = 0;
            return mapped;
        }
        let room = REJECTIONS_LISTED_MAX.saturating_sub(mapped.rejected.len());
        mapped
            .rejected
            .extend(self.map_rejected.into_iter().take(room));
        mapped.rejected_total += self.map_rejected_total;
        mapped
    }
}

/// What a metric puts into the batch: an owned value, or a histogram's bins in storage order.
enum Pushed<'m> {
    Value(store::Value),
    Bins(&'m [u16], &'m [u64]),
    Packed(hist::packed::PackedRef<'m>),
}

impl Visitor for BatchWriter<'_> {
    fn document(&mut self, _index: usize, _metrics: usize) {
        // Tags ids are per document.
        self.sets.clear();
        self.other_set = None;
    }

    fn metric(&mut self, metric: Metric<'_>) -> bool {
        let Metric {
            name,
            tags_id,
            tags,
            suffix,
            ts_ms,
            value,
            mode,
        } = metric;
        let value = match value {
            // Present without a value: counted, nothing stored (as `map_batch`).
            ValueRef::Null => {
                self.mapped.accepted += 1;
                return true;
            }
            ValueRef::Numeric(_) if mode != Mode::Set => {
                self.combining = true;
                return false;
            }
            ValueRef::Numeric(v) => Pushed::Value(store::Value::Numeric(v)),
            ValueRef::Text(text) => Pushed::Value(store::Value::Text(text.to_owned())),
            // Bins in storage order go into the batch packed, with no histogram built.
            ValueRef::Histogram(HistogramRef::Sorted { keys, counts }) => {
                Pushed::Bins(keys, counts)
            }
            // Bins the parser packed as it read them are copied as they are.
            ValueRef::Histogram(HistogramRef::Packed(bins)) => Pushed::Packed(bins),
            ValueRef::Histogram(h) => Pushed::Value(store::Value::Histogram(h.into_histogram())),
            ValueRef::CumulativeHistogram(h) => Pushed::Value(store::Value::CumulativeHistogram(
                hist::convert::Cumulative::Bins(h.into_histogram()),
            )),
        };
        let ts = ts_ms.unwrap_or(self.now_ms);
        // A metric whose tags are all its own `|ST[…]` text: its series, once seen, is pushed
        // by id. A push by id that fails goes the key's way below, which names the key.
        let cacheable = match suffix {
            Some(text) if tags.is_empty() => Some(text),
            _ => None,
        };
        if let Some(text) = cacheable {
            self.cache_first.truncate(self.cache_prefix_len);
            self.cache_first.extend_from_slice(name.as_bytes());
            let first = &self.cache_first;
            let id = self
                .cache
                .get(first, text.as_bytes(), |cache| cache.prefix_hash(first));
            if let Some(id) = id {
                let batch = &mut self.mapped.batch;
                let pushed = match &value {
                    Pushed::Packed(bins) => Some(batch.push_id_packed(id, ts, *bins)),
                    Pushed::Bins(keys, counts) => Some(batch.push_id_bins(id, ts, keys, counts)),
                    Pushed::Value(store::Value::Numeric(v)) => {
                        Some(batch.push_id(id, ts, store::Value::Numeric(*v)))
                    }
                    Pushed::Value(_) => None,
                };
                if let Some(Ok(_)) = pushed {
                    self.mapped.accepted += 1;
                    return true;
                }
            }
        }
        let kind = match &value {
            Pushed::Value(v) => v.kind(),
            Pushed::Bins(..) | Pushed::Packed(_) => store::Kind::Histogram,
        };
        let mut key = std::mem::take(&mut self.key);
        key.clear();
        let canonical = match (suffix, &self.extra_canonical) {
            (Some(text), Some(extra)) => {
                store::key::write_key_with_canonical_tags(name, text, extra, &mut key)
            }
            _ => false,
        };
        let written = match suffix {
            // Tags already in canonical order: merged with the extra tags in one pass above.
            Some(_) if canonical => Ok(()),
            // A stream's own tag list, used once: printed straight into its key.
            Some(text) => {
                debug_assert!(tags.is_empty());
                let suffix = ingest::visit::suffix_tags(text);
                let written = match &self.extra_text {
                    Some(extra) => {
                        let pairs = suffix.chain(extra.iter().copied());
                        store::key::write_key_with_tags(name, pairs, &mut key)
                    }
                    None => {
                        let pairs = suffix
                            .map(|(c, v)| (c.as_bytes(), v.as_bytes()))
                            .chain(self.extra_tags.iter().map(|t| (t.category(), t.value())));
                        store::key::write_key_with_tags(name, pairs, &mut key)
                    }
                };
                written.map_err(|e| e.to_string())
            }
            None => match self.tag_set(tags_id, tags) {
                Ok(set) => set.write_key(name, &mut key).map_err(|e| e.to_string()),
                Err(e) => Err(e.clone()),
            },
        };
        match written {
            Err(e) => self.map_reject(|| format!("metric `{name}`: {e}")),
            Ok(()) => {
                let batch = &mut self.mapped.batch;
                let pushed = match value {
                    Pushed::Value(value) => batch.push_canonical(&key, ts, value),
                    Pushed::Bins(keys, counts) => batch.push_canonical_bins(&key, ts, keys, counts),
                    Pushed::Packed(bins) => batch.push_canonical_packed(&key, ts, bins),
                };
                match pushed {
                    Ok(_) => {
                        self.mapped.accepted += 1;
                        if let Some(text) = cacheable {
                            let first = &self.cache_first;
                            let hash = self.cache.prefix_hash(first);
                            let cache_key = self.cache.key(hash, first, text.as_bytes());
                            self.misses.add(&cache_key, &key, kind);
                        }
                    }
                    Err(e) => self.map_reject(|| format!("metric `{key}`: {e}")),
                }
            }
        }
        self.key = key;
        true
    }

    fn reject(&mut self, location: &dyn Fn() -> String, reason: Reason, rest_of_body: bool) {
        self.parse_rejected_total += 1;
        if rest_of_body {
            self.mapped.stopped = true;
            self.mapped.stopped_too_large |= matches!(reason, Reason::Bound { .. });
        }
        if self.parse_rejected.len() < REJECTIONS_LISTED_MAX || rest_of_body {
            let rejection = Rejection {
                location: location(),
                reason,
                rest_of_body,
            };
            self.parse_rejected.push(rejection.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use hist::Histogram;
    use ingest::{Sample, Value};

    /// 2026-11-22T00:00:00Z.
    const NOW_MS: i64 = 1_795_305_600_000;

    fn check_tag() -> Vec<Tag> {
        vec![Tag::new("__check", "web-1").unwrap()]
    }

    type Row = (String, i64, store::Value);

    fn rows(mapped: &Mapped) -> Vec<Row> {
        mapped
            .batch
            .samples()
            .map(|(key, ts_ms, value)| {
                let store::KeyRef::Text(key) = key else {
                    panic!("a key printed as text");
                };
                (key.to_owned(), ts_ms, value.into_owned())
            })
            .collect()
    }

    /// A series written once is pushed by id from the next body on, for its own check only:
    /// the same metric key under another check is another series (the check's tags are part
    /// of the cache key), and a metric with tags from a key above it goes by key.
    #[test]
    fn series_written_once_are_pushed_by_id_per_check() {
        let dir = tempfile::tempdir().unwrap();
        let store = store::Store::open(dir.path(), store::StoreOptions::default()).unwrap();
        let cache = SeriesCache::new(1000, 1 << 20);
        let mut misses = Misses::default();
        let mut scratch = Scratch::default();
        let body = br#"{"lat|ST[host:a]":{"_type":"h","_value":["H[1.2e-03]=5","H[2.0e-03]=1"]},
            "n|ST[host:a]":{"_type":"n","_value":3},
            "outer|ST[dc:x]":{"inner|ST[host:b]":{"_type":"n","_value":1}}}"#;
        let mut map = |check: &str, misses: &mut Misses| {
            let tags = [Tag::new("__check", check).unwrap()];
            let reading = Reading {
                scratch: &mut scratch,
                cache: &cache,
                misses,
            };
            map_body_with(
                Encoding::Json,
                body,
                NOW_MS,
                &tags,
                WriteBatch::new(),
                reading,
            )
        };
        let keys = |mapped: &Mapped| -> Vec<String> {
            let samples = mapped.batch.samples();
            samples
                .map(|(key, _, _)| match key {
                    store::KeyRef::Text(text) => text.to_owned(),
                    store::KeyRef::Id(id) => format!("#{}", id.0),
                })
                .collect()
        };
        let first = map("web-1", &mut misses);
        assert_eq!(
            keys(&first),
            [
                "lat|ST[__check:web-1,host:a]",
                "n|ST[__check:web-1,host:a]",
                "outer`inner|ST[__check:web-1,dc:x,host:b]"
            ]
        );
        store.write_partial(&first.batch).unwrap();
        misses.learn(&store, &cache);
        assert_eq!(cache.len(), 2, "the two metrics with their own tags only");
        let again = map("web-1", &mut misses);
        let got = keys(&again);
        let id = |key: &str| {
            let parsed = store::key::StreamKey::parse(key).unwrap();
            store.index().lookup(&parsed).unwrap().unwrap().0 .0
        };
        assert_eq!(got[0], format!("#{}", id("lat|ST[__check:web-1,host:a]")));
        assert_eq!(got[1], format!("#{}", id("n|ST[__check:web-1,host:a]")));
        assert_eq!(got[2], "outer`inner|ST[__check:web-1,dc:x,host:b]");
        assert_eq!(again.accepted, 3);
        assert_eq!(rows_of_values(&again), rows_of_values(&first));
        misses.clear();
        // Another check: the same body is other series, pushed by key.
        let other = map("web-2", &mut misses);
        assert_eq!(
            keys(&other),
            [
                "lat|ST[__check:web-2,host:a]",
                "n|ST[__check:web-2,host:a]",
                "outer`inner|ST[__check:web-2,dc:x,host:b]"
            ]
        );
    }

    fn rows_of_values(mapped: &Mapped) -> Vec<(i64, store::Value)> {
        let samples = mapped.batch.samples();
        samples.map(|(_, ts, v)| (ts, v.into_owned())).collect()
    }

    /// The direct path against the owned one (`flat::parse` then `map_batch`, what the server
    /// did before): the same batch, counts, rejections and stop.
    /// A seeded generator: each call gives a number below `n` (an LCG; the data only has to
    /// vary reproducibly).
    fn below(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut state = seed;
        move |n| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        }
    }

    /// Rejection `i` of `mapped` mentions `needle`.
    fn assert_rejection(mapped: &Mapped, i: usize, needle: &str) {
        assert!(
            mapped.rejected.get(i).is_some_and(|r| r.contains(needle)),
            "rejection {i} should mention {needle:?}: {:?}",
            mapped.rejected
        );
    }

    fn assert_same_as_owned(body: &[u8]) -> Mapped {
        assert_same_as_owned_in(Encoding::Flat, body)
    }

    /// The direct path against the owned one (the encoding's `parse` then `map_batch`).
    fn assert_same_as_owned_in(encoding: Encoding, body: &[u8]) -> Mapped {
        let direct = map_body(encoding, body, NOW_MS, &check_tag());
        let owned = mapping::map_batch(
            encoding.parse(body, &Options::at(NOW_MS)),
            NOW_MS,
            &check_tag(),
        );
        assert_eq!(rows(&direct), rows(&owned));
        assert_eq!(direct.accepted, owned.accepted);
        assert_eq!(direct.rejected, owned.rejected);
        assert_eq!(direct.rejected_total, owned.rejected_total);
        assert_eq!(direct.stopped, owned.stopped);
        assert_eq!(direct.stopped_too_large, owned.stopped_too_large);
        direct
    }

    fn sample(name: &str, tags: &[(&str, &str)], value: Value, mode: Mode) -> Sample {
        let tags: Vec<(String, String)> = tags
            .iter()
            .map(|(c, v)| ((*c).to_owned(), (*v).to_owned()))
            .collect();
        Sample {
            name: name.to_owned(),
            tags: tags.into(),
            ts_ms: Some(NOW_MS - 1_000),
            value,
            mode,
        }
    }

    fn histogram(values: &[f64]) -> Histogram {
        let mut h = Histogram::new();
        for &v in values {
            h.insert(v);
        }
        h
    }

    #[test]
    fn every_value_kind_goes_under_its_key_with_the_check_tag() {
        let samples = vec![
            sample("cpu", &[("host", "a")], Value::Numeric(1.5), Mode::Set),
            sample("cpu", &[("host", "b")], Value::Numeric(2.5), Mode::Set),
            sample(
                "state",
                &[("host", "a")],
                Value::Text("up".into()),
                Mode::Set,
            ),
            sample("gone", &[("host", "a")], Value::Null, Mode::Set),
            sample(
                "latency",
                &[("host", "a"), ("dc", "x")],
                Value::Histogram(histogram(&[0.5, 1.5, 1.5, 30.0])),
                Mode::Set,
            ),
            sample(
                "requests",
                &[],
                Value::CumulativeHistogram(histogram(&[-2.0, 7.0])),
                Mode::Set,
            ),
            sample(
                "suffixed|ST[app:api]",
                &[("host", "a")],
                Value::Numeric(3.0),
                Mode::Set,
            ),
            sample("suffixed|ST[app:api]", &[], Value::Numeric(4.0), Mode::Set),
        ];
        let mapped = assert_same_as_owned(&ingest::flat::encode(&samples));
        assert_eq!(mapped.accepted, samples.len());
        assert_eq!(mapped.rejected_total, 0, "{:?}", mapped.rejected);
        let keys: Vec<String> = rows(&mapped).into_iter().map(|r| r.0).collect();
        assert_eq!(
            keys,
            [
                "cpu|ST[__check:web-1,host:a]",
                "cpu|ST[__check:web-1,host:b]",
                "state|ST[__check:web-1,host:a]",
                "latency|ST[__check:web-1,dc:x,host:a]",
                "requests|ST[__check:web-1]",
                "suffixed|ST[__check:web-1,app:api,host:a]",
                "suffixed|ST[__check:web-1,app:api]",
            ]
        );
    }

    #[test]
    fn histograms_as_bins_and_as_llhist_are_the_same() {
        let h = histogram(&[0.001, 0.5, 3.0, 3.0, 1e6]);
        let samples = vec![sample("h", &[("a", "b")], Value::Histogram(h), Mode::Set)];
        for form in [
            ingest::flat::HistogramForm::Bins,
            ingest::flat::HistogramForm::Llhist,
        ] {
            let mapped = assert_same_as_owned(&ingest::flat::encode_with(&samples, form));
            assert_eq!(mapped.accepted, 1);
        }
    }

    #[test]
    fn keys_the_store_refuses_are_rejections_after_the_parsers() {
        // An empty tag value is a valid httptrap tag but not a store tag; an infinite value is
        // the parser's rejection.
        let samples = vec![
            sample("bad_tag", &[("flag", "")], Value::Numeric(1.0), Mode::Set),
            sample("inf", &[], Value::Numeric(f64::INFINITY), Mode::Set),
            sample("ok", &[], Value::Numeric(1.0), Mode::Set),
        ];
        let mapped = assert_same_as_owned(&ingest::flat::encode(&samples));
        assert_eq!(mapped.accepted, 1);
        assert_eq!(mapped.rejected_total, 2, "{:?}", mapped.rejected);
        assert_rejection(&mapped, 0, "(`inf`)");
        assert_rejection(&mapped, 1, "bad_tag");
        assert!(!mapped.stopped);
    }

    #[test]
    fn modes_that_combine_take_the_owned_path() {
        let samples = vec![
            sample("c", &[], Value::Numeric(2.0), Mode::Accumulate),
            sample("c", &[], Value::Numeric(3.0), Mode::Accumulate),
            sample("g", &[], Value::Numeric(7.0), Mode::Set),
        ];
        let mapped = assert_same_as_owned(&ingest::flat::encode(&samples));
        let values: Vec<(String, f64)> = rows(&mapped)
            .into_iter()
            .map(|(key, _, value)| match value {
                store::Value::Numeric(v) => (key, v),
                other => panic!("numeric expected, got {other:?}"),
            })
            .collect();
        assert_eq!(
            values,
            [
                ("c|ST[__check:web-1]".to_owned(), 5.0),
                ("g|ST[__check:web-1]".to_owned(), 7.0)
            ]
        );
    }

    #[test]
    fn a_body_rejected_whole_stores_nothing() {
        let mut body = ingest::flat::encode(&[sample("x", &[], Value::Numeric(1.0), Mode::Set)]);
        body.truncate(body.len() - 3);
        let mapped = assert_same_as_owned(&body);
        assert!(mapped.stopped && mapped.batch.is_empty());
        assert_eq!(mapped.accepted, 0);
        assert_eq!(
            mapped.rejected_status(),
            axum::http::StatusCode::BAD_REQUEST
        );
        assert!(assert_same_as_owned(b"").batch.is_empty());
    }

    /// Generated metric lists (several documents' worth of tag sets, repeated names, every
    /// kind, bad values) give what the owned path gives.
    #[test]
    fn generated_lists_match_the_owned_path() {
        let mut next = below(0x9e37_79b9_7f4a_7c15);
        for round in 0..100 {
            let count = 1 + next(300) as usize;
            let samples: Vec<Sample> = (0..count)
                .map(|_| {
                    let host = format!("h{}", next(5));
                    let value = match next(7) {
                        0 => Value::Null,
                        1 => Value::Text(format!("t{}", next(3))),
                        2 => Value::Histogram(histogram(&[next(100) as f64, 0.25])),
                        3 => Value::Numeric(f64::NAN),
                        _ => Value::Numeric(next(1_000) as f64),
                    };
                    let name = match next(6) {
                        0 => format!("m{}|ST[app:x{}]", next(3), next(2)),
                        1 => format!("m{}|ST[zone:z{},app:x,app:x]", next(3), next(2)),
                        2 => format!("m{}|ST[a0:c,a:z]", next(3)),
                        _ => format!("m{}", next(20)),
                    };
                    let tags: &[(&str, &str)] = match next(4) {
                        0 => &[],
                        1 => &[("flag", "")],
                        _ => &[("dc", "x")],
                    };
                    let mut s = sample(&name, tags, value, Mode::Set);
                    // Half without the host: a name's suffix is then its only tags.
                    let mut all = s.tags.to_vec();
                    if next(2) == 0 {
                        all.push(("host".to_owned(), host));
                    }
                    s.tags = all.into();
                    s
                })
                .collect();
            let mapped = assert_same_as_owned(&ingest::flat::encode(&samples));
            assert_eq!(
                mapped.accepted + mapped.rejected_total,
                count,
                "round {round}"
            );
        }
    }

    /// One httptrap JSON body of every kind of value, key and rejection; `fl` adds `_fl`
    /// numerics (which make the body take the owned path).
    fn mixed_json(fl: bool) -> String {
        let b64 = histogram(&[0.25, 0.25, 40.0]).to_base64();
        let counters = if fl {
            r#""reqs": {"_type": "L", "_value": 3, "_fl": "+"},
               "reqs|ST[x:1]": {"_type": "L", "_value": 4, "_fl": "+"},
               "load_avg": {"_type": "n", "_value": [1, 2], "_fl": "~"},"#
        } else {
            ""
        };
        format!(
            r#"{{"cpu": 1.5, "state": "up", "quoted": "a\"b", "flag": true, "num_text": "42",
              "gone": null, "list": [1, "two", 3],
              "host|ST[host:a]": {{
                "load": 0.5,
                "lat": {{"_type": "h", "_value": ["H[1.2e-03]=5", "H[3.4e+00]=2"]}},
                "lat_unsorted": {{"_type": "h", "_value": ["H[3.4e+00]=2", "H[1.2e-03]=5"]}},
                "lat_repeated": {{"_type": "h", "_value": ["H[1.2e-03]=5", "H[1.2e-03]=1"]}},
                "lat_b64": {{"_type": "h", "_value": "{b64}"}},
                "lat_mixed": {{"_type": "h", "_value": ["{b64}", "H[1.2e-03]=5", 7]}},
                "cum": {{"_type": "H", "_value": ["H[1.0e+00]=1"], "_tags": ["dc:x"]}},
                "tagged": {{"_type": "n", "_value": 2, "_tags": ["dc:y", "rack:r1"]}},
                "text": {{"_type": "s", "_value": "warm", "_ts": {ts}}},
                {counters}
                "inner|ST[app:api]": {{"a": 1, "b": {{"_type": "h", "_value": ["H[2.0e+00]=1"]}}}},
                "after": 9
              }},
              "bad": {{"_type": "x", "_value": 1}},
              "inf": 1e999,
              "empty_value|ST[flag:]": 1,
              "solo|ST[rack:r2,az:b]": {{"_type": "n", "_value": 3}},
              "h_fl": {{"_type": "h", "_value": ["H[1.0e+00]=1"], "_fl": "+"}},
              "bad_tag|ST[a:b": 1}}
            {{"second|ST[host:b]": {{"load": 0.7}}, "cpu": 2.5}}"#,
            ts = NOW_MS - 5_000
        )
    }

    #[test]
    fn json_bodies_map_like_parse_then_map_batch() {
        for fl in [false, true] {
            let body = mixed_json(fl);
            let mapped = assert_same_as_owned_in(Encoding::Json, body.as_bytes());
            assert!(!mapped.stopped);
            // `bad`, `inf` and `bad_tag|…` are the parser's; `empty_value` the mapping's.
            assert_eq!(mapped.rejected_total, 4, "{:?}", mapped.rejected);
            assert_rejection(&mapped, 0, "key `bad`");
            assert_rejection(&mapped, 3, "empty_value");
            let keys: Vec<String> = rows(&mapped).into_iter().map(|r| r.0).collect();
            for key in [
                "host`lat|ST[__check:web-1,host:a]",
                "host`cum|ST[__check:web-1,dc:x,host:a]",
                "host`tagged|ST[__check:web-1,dc:y,host:a,rack:r1]",
                "host`inner`b|ST[__check:web-1,app:api,host:a]",
                "host`after|ST[__check:web-1,host:a]",
                "second`load|ST[__check:web-1,host:b]",
                "solo|ST[__check:web-1,az:b,rack:r2]",
            ] {
                assert!(keys.iter().any(|k| k == key), "{key} in {keys:?}");
            }
        }
    }

    #[test]
    fn json_fl_counters_combine() {
        let mapped = assert_same_as_owned_in(Encoding::Json, mixed_json(true).as_bytes());
        let value_of = |key: &str| rows(&mapped).into_iter().find(|r| r.0 == key).map(|r| r.2);
        let reqs = value_of("host`reqs|ST[__check:web-1,host:a]");
        assert_eq!(reqs, Some(store::Value::Numeric(3.0)));
        let load = value_of("host`load_avg|ST[__check:web-1,host:a]");
        assert_eq!(load, Some(store::Value::Numeric(1.5)));
    }

    #[test]
    fn json_stops_and_bounds_match_the_owned_path() {
        for body in [
            &b""[..],
            b"{\"a\": 1} {\"b\": ",
            b"{\"a\": 1, \"b\": [1, 2,]}",
            b"{\"a|ST[t:v]\": {\"x\": 1}} garbage",
            b"{\"\\ud800\": 1, \"ok\": 2}",
        ] {
            assert_same_as_owned_in(Encoding::Json, body);
        }
        let stopped = assert_same_as_owned_in(Encoding::Json, b"{\"a\": 1} {\"b\": ");
        assert!(stopped.stopped && stopped.batch.is_empty());
    }

    /// Generated JSON documents (nested keys with and without `|ST[…]`, repeated names, every
    /// kind, bad values, several documents) give what the owned path gives.
    #[test]
    fn generated_json_matches_the_owned_path() {
        let mut next = below(0x2545_f491_4f6c_dd1d);
        for round in 0..200 {
            let mut body = String::new();
            for _ in 0..1 + next(3) {
                body.push('{');
                for member in 0..1 + next(30) {
                    if member > 0 {
                        body.push(',');
                    }
                    // Suffixes lent as they are (sorted or not, repeated tags, `:` in a
                    // value, a tag without a value, a text order unlike the tag order) and
                    // ones the parser splits (`b"…"` parts, escapes in the key).
                    let key = match next(13) {
                        0 => format!("k{}|ST[host:h{}]", next(4), next(3)),
                        1 => format!("k{}|ST[flag:]", next(4)),
                        2 => format!("k{}|ST[host:h{},app:a{}]", next(4), next(3), next(2)),
                        3 => format!("k{}|ST[a:z,a0:c]", next(4)),
                        4 => format!("k{}|ST[app:x,app:x]", next(4)),
                        5 => format!("k{}|ST[url:http://x:80,flag]", next(4)),
                        6 => format!("k{}|ST[b\\\"YSBi\\\":v,app:x]", next(4)),
                        7 => format!("k{}|ST[__check:other]", next(4)),
                        8 => "k\\u0031|ST[host:h1]".to_owned(),
                        _ => format!("k{}", next(6)),
                    };
                    let value = match next(10) {
                        0 => "null".to_owned(),
                        1 => format!("\"t{}\"", next(3)),
                        2 => format!(
                            "{{\"_type\": \"h\", \"_value\": [\"H[{}.0e+00]=2\"]}}",
                            1 + next(9)
                        ),
                        3 => format!("{{\"a\": {}, \"b|ST[app:x]\": {}}}", next(9), next(9)),
                        4 => "{\"_type\": \"q\", \"_value\": 1}".to_owned(),
                        5 => format!(
                            "{{\"_type\": \"n\", \"_value\": {}, \"_tags\": [\"dc:{}\"]}}",
                            next(9),
                            next(2)
                        ),
                        9 => format!("[{}, {{\"_type\": \"n\", \"_value\": 1}}]", next(9)),
                        _ => next(1_000).to_string(),
                    };
                    body.push_str(&format!("\"{key}\": {value}"));
                }
                body.push('}');
            }
            let mapped = assert_same_as_owned_in(Encoding::Json, body.as_bytes());
            assert!(!mapped.stopped, "round {round}: {body}");
        }
    }
}
