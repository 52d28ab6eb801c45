//! Prometheus remote write 1.0 straight into a store batch: the body is decoded with
//! `ingest::remote_write::visit`, which lends each series' labels from the body; the series'
//! canonical key is printed once (`TagSet::from_labels`, the key remote read and PromQL see the
//! labels as) and every sample of it pushed under that key. No `ingest::Sample`, tag list or
//! label copy is made per sample or series. A series whose label bytes the server has seen
//! before (its cache, `idcache`) is pushed by series id: its labels are not even decoded.
//!
//! Status codes as for every other write (`App::ingest`): a body rejected whole is a 400 (413
//! past a size bound), a bad series or sample is left out and named in a 400 while the good
//! ones are stored, a store failure is a 5xx the sender retries.

use std::cell::RefCell;
use std::sync::Arc;

use ingest::remote_write::{PointKind, Visitor};
use ingest::{Options, Reason, Rejection};
use store::key::{StreamKey, TagSet};
use store::SeriesId;
use store::{Store, WriteBatch};

use super::idcache::{Misses, Reader, SeriesCache};
use super::mapping::{Mapped, REJECTIONS_LISTED_MAX};
use super::{now_ms, unzipped, App, Endpoint, WriteError};

/// Decompresses (gzip if sent so, then snappy), decodes and writes one remote write body;
/// returns what it became. A body rejected whole is not written at all.
pub async fn ingest(
    app: &Arc<App>,
    body: impl AsRef<[u8]> + Send + 'static,
    gzip: bool,
) -> Result<Mapped, WriteError> {
    app.write_blocking(move |app| write_body(app, body.as_ref(), gzip))
        .await
}

/// Buffers a blocking-pool thread keeps between bodies (the decompressed body, the store
/// batch), so a steady stream of requests does not fault in fresh pages for each; larger ones
/// are dropped after use.
const RETAINED_BODY_BYTES_MAX: usize = 8 << 20;

thread_local! {
    static BUFFERS: RefCell<(Vec<u8>, WriteBatch, Misses)> = RefCell::new(Default::default());
}

fn write_body(app: &App, body: &[u8], gzip: bool) -> Result<Mapped, WriteError> {
    let bytes = unzipped(body, gzip, app.config.limits.body_size_bytes_max)?;
    let (mut raw, batch, mut misses) = BUFFERS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let cache = &app.series_ids.remote_write;
    let ids = Ids {
        cache,
        store: Some(&app.store),
        misses: &mut misses,
    };
    let mut mapped = map_body_into(&bytes, &Options::at(now_ms()), &mut raw, batch, ids);
    let result = app.store_mapped(Endpoint::RemoteWrite, &mut mapped);
    if result.is_ok() && !mapped.stopped {
        // The series of the misses exist now: their ids are cached for the next request.
        misses.learn(&app.store, cache);
    }
    misses.clear();
    let batch = mapped.take_batch_to_keep();
    if raw.capacity() > RETAINED_BODY_BYTES_MAX {
        raw = Vec::new();
    }
    BUFFERS.with(|b| *b.borrow_mut() = (raw, batch, misses));
    result.map(|()| mapped)
}

/// One snappy body as a store batch plus its rejections (not written yet), nothing cached.
#[cfg(test)]
fn map_body(body: &[u8], options: &Options) -> Mapped {
    let cache = SeriesCache::new(1, 1);
    let mut misses = Misses::default();
    let ids = Ids {
        cache: &cache,
        store: None,
        misses: &mut misses,
    };
    map_body_into(body, options, &mut Vec::new(), WriteBatch::new(), ids)
}

/// The series id cache a body is mapped with: hits are pushed by id, misses (pushed by key)
/// are added to `misses`; `store` names a cached series in a rejection.
struct Ids<'c> {
    cache: &'c SeriesCache,
    store: Option<&'c Store>,
    misses: &'c mut Misses,
}

/// [`map_body`] decompressing into `raw` and pushing into `batch` (empty): reused buffers.
fn map_body_into(
    body: &[u8],
    options: &Options,
    raw: &mut Vec<u8>,
    batch: WriteBatch,
    ids: Ids<'_>,
) -> Mapped {
    assert!(batch.is_empty(), "the batch starts empty");
    if let Err(reason) = ingest::remote_write::decompress_into(body, raw) {
        return rejected_body(reason);
    }
    let mut writer = BatchWriter {
        mapped: Mapped {
            batch,
            ..Mapped::default()
        },
        key: String::new(),
        key_ok: false,
        series: 0,
        name_len: 0,
        slot: None,
        reader: ids.cache.reader(),
        ids,
        cached: None,
        labels_raw: Vec::new(),
        labels_hash: 0,
        miss_unrecorded: false,
    };
    match ingest::remote_write::visit(raw, options, &mut writer) {
        Ok(()) => writer.mapped,
        // A body rejected part way: what was pushed is dropped, nothing is written or cached.
        Err(reason) => {
            writer.ids.misses.clear();
            rejected_body(reason)
        }
    }
}

fn rejected_body(reason: Reason) -> Mapped {
    let too_large = matches!(reason, Reason::Bound { .. });
    let rejection = Rejection {
        location: "body".to_owned(),
        reason,
        rest_of_body: true,
    };
    Mapped {
        rejected: vec![rejection.to_string()],
        rejected_total: 1,
        stopped: true,
        stopped_too_large: too_large,
        ..Mapped::default()
    }
}

/// The visitor: each series' key printed once into `key`, its samples pushed under it; or,
/// for a series in the cache, pushed by id.
struct BatchWriter<'c> {
    mapped: Mapped,
    /// The current series' canonical key, `name` first (valid when `key_ok`).
    key: String,
    key_ok: bool,
    /// The current series' index in the request.
    series: usize,
    /// Length of the metric name at the start of `key`, for naming rejections.
    name_len: usize,
    /// The batch slot of the current series' float samples once one is pushed.
    slot: Option<usize>,
    ids: Ids<'c>,
    /// The cache, read under one shared lock for the whole body.
    reader: Reader<'c>,
    /// The current series' id when its label bytes were in the cache.
    cached: Option<SeriesId>,
    /// The current series' label bytes and their hash, when not (to cache after the write).
    labels_raw: Vec<u8>,
    labels_hash: u64,
    /// The current (uncached) series is not in `misses` yet.
    miss_unrecorded: bool,
}

impl BatchWriter<'_> {
    fn reject(&mut self, message: impl FnOnce() -> String) {
        self.mapped.rejected_total += 1;
        if self.mapped.rejected.len() < REJECTIONS_LISTED_MAX {
            self.mapped.rejected.push(message());
        }
    }
}

impl Visitor for BatchWriter<'_> {
    fn known_series(&mut self, index: usize, labels_raw: &[u8]) -> bool {
        self.series = index;
        self.slot = None;
        self.cached = self
            .reader
            .get(labels_raw, b"", |cache| cache.prefix_hash(labels_raw));
        if self.cached.is_some() {
            self.key_ok = true;
            return true;
        }
        self.labels_hash = self.reader.prefix_hash(labels_raw);
        self.labels_raw.clear();
        self.labels_raw.extend_from_slice(labels_raw);
        self.miss_unrecorded = true;
        false
    }

    fn series(&mut self, index: usize, name: &str, labels: &[(&str, &str)]) -> bool {
        self.series = index;
        self.slot = None;
        self.cached = None;
        self.key.clear();
        let written = TagSet::from_labels(labels.iter().copied()).and_then(|(name, set)| {
            set.write_key(name, &mut self.key)?;
            Ok(name.len())
        });
        match written {
            Ok(name_len) => {
                self.key_ok = true;
                self.name_len = name_len;
                true
            }
            Err(e) => {
                self.key_ok = false;
                self.reject(|| format!("series {index} (`{name}`): {e}"));
                false
            }
        }
    }

    fn reject_series(&mut self, index: usize, reason: Reason) {
        self.key_ok = false;
        self.cached = None;
        let rejection = Rejection {
            location: format!("series {index}"),
            reason,
            rest_of_body: false,
        };
        self.reject(|| rejection.to_string());
    }

    fn point(
        &mut self,
        kind: PointKind,
        i: usize,
        point: Result<(i64, ingest::Value), Reason>,
    ) -> bool {
        if !self.key_ok {
            debug_assert!(false, "a point of a series refused");
            return true;
        }
        if let Some(id) = self.cached {
            return self.point_by_id(id, kind, i, point);
        }
        let (series, name) = (self.series, &self.key[..self.name_len]);
        let (ts_ms, value) = match point {
            Ok(point) => point,
            Err(reason) => {
                let rejection = Rejection {
                    location: format!("series {series} (`{name}`), {} {i}", kind.name()),
                    reason,
                    rest_of_body: false,
                };
                self.reject(|| rejection.to_string());
                return true;
            }
        };
        let batch = &mut self.mapped.batch;
        let kind = match &value {
            ingest::Value::Numeric(_) => store::Kind::Numeric,
            _ => store::Kind::Histogram,
        };
        let pushed = match (value, self.slot) {
            (ingest::Value::Numeric(v), Some(slot)) => {
                batch.push_at(slot, ts_ms, store::Value::Numeric(v))
            }
            (ingest::Value::Numeric(v), None) => batch
                .push_canonical(&self.key, ts_ms, store::Value::Numeric(v))
                .map(|slot| self.slot = Some(slot)),
            (ingest::Value::Histogram(h), _) => batch
                .push_canonical(&self.key, ts_ms, store::Value::Histogram(h))
                .map(drop),
            (ingest::Value::CumulativeHistogram(h), _) => batch
                .push_canonical(
                    &self.key,
                    ts_ms,
                    store::Value::CumulativeHistogram(hist::convert::Cumulative::Bins(h)),
                )
                .map(drop),
            // The decoder makes only numerics and histograms.
            (ingest::Value::Null | ingest::Value::Text(_), _) => {
                debug_assert!(false, "remote write point of another kind");
                return true;
            }
        };
        match pushed {
            Ok(()) => {
                self.mapped.accepted += 1;
                if std::mem::take(&mut self.miss_unrecorded) {
                    let key = self.reader.key(self.labels_hash, &self.labels_raw, b"");
                    self.ids.misses.add(&key, &self.key, kind);
                }
            }
            Err(e) => {
                let key = &self.key;
                let message = format!("metric `{key}`: {e}");
                self.reject(|| message);
            }
        }
        true
    }
}

impl BatchWriter<'_> {
    /// A point of a cached series, pushed by id (a kind clash is refused by the store and
    /// named by key, as for a series pushed by key).
    fn point_by_id(
        &mut self,
        id: SeriesId,
        kind: PointKind,
        i: usize,
        point: Result<(i64, ingest::Value), Reason>,
    ) -> bool {
        let (ts_ms, value) = match point {
            Ok(point) => point,
            Err(reason) => {
                let name = self.cached_name(id);
                let rejection = Rejection {
                    location: format!("series {} (`{name}`), {} {i}", self.series, kind.name()),
                    reason,
                    rest_of_body: false,
                };
                self.reject(|| rejection.to_string());
                return true;
            }
        };
        let batch = &mut self.mapped.batch;
        let pushed = match (value, self.slot) {
            (ingest::Value::Numeric(v), Some(slot)) => {
                batch.push_at(slot, ts_ms, store::Value::Numeric(v))
            }
            (ingest::Value::Numeric(v), None) => batch
                .push_id(id, ts_ms, store::Value::Numeric(v))
                .map(|slot| self.slot = Some(slot)),
            (ingest::Value::Histogram(h), _) => batch
                .push_id(id, ts_ms, store::Value::Histogram(h))
                .map(drop),
            (ingest::Value::CumulativeHistogram(h), _) => batch
                .push_id(
                    id,
                    ts_ms,
                    store::Value::CumulativeHistogram(hist::convert::Cumulative::Bins(h)),
                )
                .map(drop),
            (ingest::Value::Null | ingest::Value::Text(_), _) => {
                debug_assert!(false, "remote write point of another kind");
                return true;
            }
        };
        match pushed {
            Ok(()) => self.mapped.accepted += 1,
            Err(e) => {
                let key = self.cached_key(id);
                let message = format!("metric `{key}`: {e}");
                self.reject(|| message);
            }
        }
        true
    }

    /// The canonical key of a cached series (for messages only).
    fn cached_key(&self, id: SeriesId) -> String {
        self.ids
            .store
            .and_then(|store| store.index().key_text(id).ok().flatten())
            .unwrap_or_else(|| format!("series id {}", id.0))
    }

    /// The metric name of a cached series (for messages only).
    fn cached_name(&self, id: SeriesId) -> String {
        let key = self.cached_key(id);
        match StreamKey::parse(&key) {
            Ok(parsed) => parsed.name().to_owned(),
            Err(_) => key,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use ingest::remote_write::proto;
    use prost::Message;

    /// 2026-11-22T00:00:00Z.
    const NOW_MS: i64 = 1_795_305_600_000;

    fn label(name: &str, value: &str) -> proto::Label {
        proto::Label {
            name: name.into(),
            value: value.into(),
        }
    }

    fn body(timeseries: Vec<proto::TimeSeries>) -> Vec<u8> {
        let raw = proto::WriteRequest { timeseries }.encode_to_vec();
        snap::raw::Encoder::new().compress_vec(&raw).unwrap()
    }

    fn keys(batch: &WriteBatch) -> Vec<(String, i64, f64)> {
        let mut out = Vec::new();
        for (key, ts, v) in batch.samples() {
            if let (store::KeyRef::Text(k), store::Value::Numeric(x)) = (key, &*v) {
                out.push((k.to_owned(), ts, *x));
            }
        }
        out
    }

    #[test]
    fn samples_go_under_the_key_of_their_labels() {
        let series = proto::TimeSeries {
            labels: vec![
                label("job", "api"),
                label("__name__", "up"),
                label("dc", "x"),
                label("empty", ""),
            ],
            samples: vec![
                proto::Sample {
                    value: 1.0,
                    timestamp: NOW_MS - 2,
                },
                proto::Sample {
                    value: 2.0,
                    timestamp: NOW_MS - 1,
                },
            ],
            ..Default::default()
        };
        let mapped = map_body(&body(vec![series]), &Options::at(NOW_MS));
        assert_eq!(mapped.rejected_total, 0, "{:?}", mapped.rejected);
        assert_eq!(mapped.accepted, 2);
        let expected = store::key::StreamKey::from_labels([
            ("job", "api"),
            ("__name__", "up"),
            ("dc", "x"),
            ("empty", ""),
        ])
        .unwrap()
        .canonical();
        assert_eq!(
            keys(&mapped.batch),
            vec![
                (expected.clone(), NOW_MS - 2, 1.0),
                (expected, NOW_MS - 1, 2.0)
            ]
        );
    }

    #[test]
    fn bad_series_and_samples_are_named_and_the_rest_kept() {
        let sample = |value: f64| proto::Sample {
            value,
            timestamp: NOW_MS,
        };
        let duplicate = proto::TimeSeries {
            labels: vec![label("__name__", "a"), label("x", "1"), label("x", "2")],
            samples: vec![sample(1.0)],
            ..Default::default()
        };
        let infinite = proto::TimeSeries {
            labels: vec![label("__name__", "b")],
            samples: vec![sample(f64::INFINITY), sample(3.0)],
            ..Default::default()
        };
        let mapped = map_body(&body(vec![duplicate, infinite]), &Options::at(NOW_MS));
        assert_eq!(mapped.accepted, 1);
        assert_eq!(mapped.rejected_total, 2, "{:?}", mapped.rejected);
        assert!(
            mapped.rejected[0].starts_with("series 0 (`a`)"),
            "{:?}",
            mapped.rejected
        );
        assert!(
            mapped.rejected[1].starts_with("series 1 (`b`), sample 0"),
            "{:?}",
            mapped.rejected
        );
        assert_eq!(keys(&mapped.batch), vec![("b".to_owned(), NOW_MS, 3.0)]);
        assert!(!mapped.stopped);
    }

    #[test]
    fn a_body_malformed_after_good_series_stores_and_caches_nothing() {
        let good = proto::TimeSeries {
            labels: vec![label("__name__", "up"), label("job", "a")],
            samples: vec![proto::Sample {
                value: 1.0,
                timestamp: NOW_MS,
            }],
            ..Default::default()
        };
        let mut raw = proto::WriteRequest {
            timeseries: vec![good.clone(), good],
        }
        .encode_to_vec();
        // A third series whose sample's value (field 1, a double) comes as a varint: prost
        // refuses the whole body; the decoder finds it after visiting two series.
        raw.extend_from_slice(&[0x0a, 4, 0x12, 2, 0x08, 1]);
        let body = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
        let cache = SeriesCache::new(100, 1 << 20);
        // The series cached (its label bytes, as prost writes them first): pushed by id.
        let labels = proto::TimeSeries {
            labels: vec![label("__name__", "up"), label("job", "a")],
            ..Default::default()
        }
        .encode_to_vec();
        cache.insert(
            &cache.key(cache.prefix_hash(&labels), &labels, b""),
            SeriesId(5),
        );
        let mut misses = Misses::default();
        let good_only = snap::raw::Encoder::new()
            .compress_vec(&raw[..raw.len() - 6])
            .unwrap();
        let first = map_body_into(
            &good_only,
            &Options::at(NOW_MS),
            &mut Vec::new(),
            WriteBatch::new(),
            Ids {
                cache: &cache,
                store: None,
                misses: &mut misses,
            },
        );
        assert_eq!(first.accepted, 2, "{:?}", first.rejected);
        assert!(first
            .batch
            .samples()
            .all(|(key, _, _)| key == store::KeyRef::Id(SeriesId(5))));
        assert!(misses.is_empty());
        misses.clear();
        let mapped = map_body_into(
            &body,
            &Options::at(NOW_MS),
            &mut Vec::new(),
            WriteBatch::new(),
            Ids {
                cache: &cache,
                store: None,
                misses: &mut misses,
            },
        );
        assert!(mapped.stopped && mapped.batch.is_empty());
        assert_eq!(mapped.accepted, 0);
        assert!(misses.is_empty());
        assert!(
            mapped.rejected[0].contains("wire type"),
            "{:?}",
            mapped.rejected
        );
        assert_eq!(
            mapped.rejected_status(),
            axum::http::StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn a_body_rejected_whole_stores_nothing() {
        let mapped = map_body(b"not snappy", &Options::at(NOW_MS));
        assert!(mapped.stopped && mapped.batch.is_empty());
        assert!(
            mapped.rejected[0].contains("snappy"),
            "{:?}",
            mapped.rejected
        );
        assert_eq!(
            mapped.rejected_status(),
            axum::http::StatusCode::BAD_REQUEST
        );
    }
}
