//! Influx line protocol straight into a store batch: `ingest::influx::visit` lends each line
//! from the body; a field whose series (the line's measurement and tag section, then the field
//! key, as sent) is in the server's cache is pushed by series id, without reading the line's
//! tags or printing its key. Other fields get their canonical key printed (the tags read and
//! checked once per line) and are pushed by key; their ids are cached once the write that
//! creates them has succeeded.
//!
//! Responses as from `ingest::influx::parse` + `mapping::map_batch`: a bad line is left out and
//! named, a body past `SAMPLES_PER_BATCH_MAX` samples stores nothing (413), a kind clash is
//! refused by the store and named by key.

use std::cell::RefCell;
use std::sync::Arc;

use ingest::influx::{Line, Precision, Visitor};
use ingest::{Options, Reason, Rejection, SAMPLES_PER_BATCH_MAX};
use store::key::TagSet;
use store::SeriesId;
use store::WriteBatch;

use super::idcache::{Misses, Reader, SeriesCache};
use super::mapping::{Mapped, REJECTIONS_LISTED_MAX};
use super::{now_ms, unzipped, App, Endpoint, WriteError};

/// Decompresses (gzip if sent so), reads and writes one body; returns what it became.
pub async fn ingest(
    app: &Arc<App>,
    body: impl AsRef<[u8]> + Send + 'static,
    gzip: bool,
    precision: Precision,
) -> Result<Mapped, WriteError> {
    app.write_blocking(move |app| write_body(app, body.as_ref(), gzip, precision))
        .await
}

thread_local! {
    static BUFFERS: RefCell<(WriteBatch, Misses)> = RefCell::new(Default::default());
}

fn write_body(
    app: &App,
    body: &[u8],
    gzip: bool,
    precision: Precision,
) -> Result<Mapped, WriteError> {
    let bytes = unzipped(body, gzip, app.config.limits.body_size_bytes_max)?;
    let (batch, mut misses) = BUFFERS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let cache = &app.series_ids.influx;
    let options = Options::at(now_ms());
    let mut mapped = map_body(&bytes, &options, precision, cache, batch, &mut misses);
    let result = app.store_mapped(Endpoint::Influx, &mut mapped);
    if result.is_ok() && !mapped.stopped {
        misses.learn(&app.store, cache);
    }
    misses.clear();
    let batch = mapped.take_batch_to_keep();
    BUFFERS.with(|b| *b.borrow_mut() = (batch, misses));
    result.map(|()| mapped)
}

/// One body as a store batch (empty on entry) plus its rejections; not written yet. The keys
/// pushed by text are added to `misses`.
fn map_body(
    body: &[u8],
    options: &Options,
    precision: Precision,
    cache: &SeriesCache,
    batch: WriteBatch,
    misses: &mut Misses,
) -> Mapped {
    assert!(batch.is_empty(), "the batch starts empty");
    let mut writer = BatchWriter {
        mapped: Mapped {
            batch,
            ..Mapped::default()
        },
        cache: cache.reader(),
        misses,
        now_ms: options.now_ms,
        samples: 0,
        ids: Vec::new(),
        name: String::new(),
        key: String::new(),
    };
    ingest::influx::visit(body, options, precision, &mut writer);
    let mut mapped = writer.mapped;
    if mapped.stopped {
        // Nothing of a stopped body is stored.
        mapped.batch.clear();
        writer.misses.clear();
    }
    mapped
}

struct BatchWriter<'c> {
    mapped: Mapped,
    /// Held for the whole body (dropped before the misses are learned).
    cache: Reader<'c>,
    misses: &'c mut Misses,
    now_ms: i64,
    /// Samples of well-formed lines so far (the parser's batch bound counts these).
    samples: usize,
    /// The current line's fields' cached ids.
    ids: Vec<Option<SeriesId>>,
    /// Scratch: a field's stream name and canonical key.
    name: String,
    key: String,
}

impl BatchWriter<'_> {
    fn reject(&mut self, message: impl FnOnce() -> String) {
        self.mapped.rejected_total += 1;
        if self.mapped.rejected.len() < REJECTIONS_LISTED_MAX {
            self.mapped.rejected.push(message());
        }
    }

    fn reject_line(&mut self, line_no: usize, offset: usize, reason: Reason, rest: bool) {
        let rejection = Rejection {
            location: format!("line {line_no}, column {}", offset + 1),
            reason,
            rest_of_body: rest,
        };
        self.reject(|| rejection.to_string());
    }
}

impl<'a> Visitor<'a> for BatchWriter<'_> {
    fn line(&mut self, line: &Line<'a, '_>) -> bool {
        let fields = line.fields;
        if self.samples + fields.len() > SAMPLES_PER_BATCH_MAX {
            // As the parser's batch: the body stops here and nothing of it is stored.
            let reason = Reason::Bound {
                what: "samples in the batch",
                size: SAMPLES_PER_BATCH_MAX + 1,
                max: SAMPLES_PER_BATCH_MAX,
            };
            self.mapped.stopped = true;
            self.mapped.stopped_too_large = true;
            self.mapped.rejected_total += 1;
            let rejection = Rejection {
                location: format!("line {}, column 1", line.line_no),
                reason,
                rest_of_body: true,
            };
            self.mapped.rejected.push(rejection.to_string());
            return false;
        }
        self.samples += fields.len();
        let series = line.series.as_bytes();
        // The series section's hash, computed only if a lookup needs it.
        let mut prefix_hash = None;
        self.ids.clear();
        for field in fields {
            let id = self.cache.get(series, field.raw_key.as_bytes(), |cache| {
                *prefix_hash.get_or_insert_with(|| cache.prefix_hash(series))
            });
            self.ids.push(id);
        }
        // Tags are read only for a line with a field not cached. A line with a cached field
        // has a section that read without error before, so the line is never half pushed.
        let tag_set = if self.ids.iter().all(Option::is_some) {
            None
        } else {
            match line.tags() {
                Ok(tags) => Some(
                    TagSet::new(tags.iter().map(|(c, v)| (c.as_bytes(), v.as_bytes())))
                        .map_err(|e| e.to_string()),
                ),
                Err((offset, reason)) => {
                    self.reject_line(line.line_no, offset, reason, false);
                    return true;
                }
            }
        };
        let ts_ms = line.ts_ms.unwrap_or(self.now_ms);
        for (i, field) in fields.iter().enumerate() {
            let value = match &field.value {
                ingest::Value::Numeric(v) => store::Value::Numeric(*v),
                ingest::Value::Text(t) => store::Value::Text(t.clone()),
                // The line protocol has no other kinds.
                _ => {
                    debug_assert!(false, "an Influx field of another kind");
                    continue;
                }
            };
            self.name.clear();
            if let Some(id) = self.ids[i] {
                match self.mapped.batch.push_id(id, ts_ms, value) {
                    Ok(_) => self.mapped.accepted += 1,
                    Err(e) => {
                        let name = field_name(&mut self.name, &line.measurement, &field.key);
                        let message = format!("metric `{name}`: {e}");
                        self.reject(|| message);
                    }
                }
                continue;
            }
            let kind = value.kind();
            let name = field_name(&mut self.name, &line.measurement, &field.key);
            self.key.clear();
            let written = match &tag_set {
                Some(Ok(set)) => set
                    .write_key(name, &mut self.key)
                    .map_err(|e| e.to_string()),
                Some(Err(e)) => Err(e.clone()),
                None => Err("tags not read".to_owned()),
            };
            if let Err(e) = written {
                let message = format!("metric `{name}`: {e}");
                self.reject(|| message);
                continue;
            }
            match self.mapped.batch.push_canonical(&self.key, ts_ms, value) {
                Ok(_) => {
                    self.mapped.accepted += 1;
                    let cache = &self.cache;
                    let h = *prefix_hash.get_or_insert_with(|| cache.prefix_hash(series));
                    let key = cache.key(h, series, field.raw_key.as_bytes());
                    self.misses.add(&key, &self.key, kind);
                }
                Err(e) => {
                    let message = format!("metric `{}`: {e}", self.key);
                    self.reject(|| message);
                }
            }
        }
        true
    }

    fn reject(&mut self, line_no: usize, offset: usize, reason: Reason) {
        self.reject_line(line_no, offset, reason, false);
    }
}

/// `<measurement>_<field>` in `out`.
fn field_name<'s>(out: &'s mut String, measurement: &str, key: &str) -> &'s str {
    out.clear();
    out.push_str(measurement);
    out.push(ingest::influx::FIELD_SEPARATOR);
    out.push_str(key);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::serve::mapping::map_batch;

    /// 2026-11-22T00:00:00Z.
    const NOW_MS: i64 = 1_795_305_600_000;

    fn samples(batch: &WriteBatch) -> Vec<(String, i64, store::Value)> {
        batch
            .samples()
            .map(|(key, ts, v)| {
                let key = match key {
                    store::KeyRef::Text(t) => t.to_owned(),
                    store::KeyRef::Id(id) => format!("#{}", id.0),
                };
                (key, ts, v.into_owned())
            })
            .collect()
    }

    /// The body through the visitor (empty cache) and through parse + map_batch: the same
    /// batch, counts and rejections.
    fn same_as_parse(body: &str) {
        let options = Options::at(NOW_MS);
        let cache = SeriesCache::new(1000, 1 << 20);
        let mut misses = Misses::default();
        let visited = map_body(
            body.as_bytes(),
            &options,
            Precision::Milliseconds,
            &cache,
            WriteBatch::new(),
            &mut misses,
        );
        let parsed = ingest::influx::parse(body.as_bytes(), &options, Precision::Milliseconds);
        let mapped = map_batch(parsed, NOW_MS, &[]);
        assert_eq!(samples(&visited.batch), samples(&mapped.batch), "{body}");
        assert_eq!(visited.accepted, mapped.accepted, "{body}");
        assert_eq!(visited.rejected_total, mapped.rejected_total, "{body}");
        let mut a = visited.rejected.clone();
        let mut b = mapped.rejected.clone();
        a.sort();
        b.sort();
        assert_eq!(a, b, "{body}");
        assert_eq!(visited.stopped, mapped.stopped, "{body}");
    }

    #[test]
    fn the_visitor_maps_as_parse_and_map_batch_do() {
        let ts = NOW_MS - 1000;
        for body in [
            format!("cpu,host=a,dc=x user=1.5,sys=2i {ts}\ncpu,host=a user=2.5 {ts}\n"),
            format!("m,t\\ x=1\\,2 f\\=g=1,s=\"txt\" {ts}\nm v=1 {ts}\nm,t=1 v= {ts}\n"),
            format!("m,=x v=1 {ts}\nm,a=b v=1,w=x {ts}\n# comment\n\nm,a=b,a=c v=1 {ts}\n"),
            format!("m,a=b v=1 1\nm,a=b x {ts}\nm,a v=1 {ts}\nm,a=b v=1 {ts} extra\n"),
            "m,a=b v=1\nm,a=b v=2\n".to_owned(),
            format!("m v=1 {ts}\nm v=\"text now\" {ts}\n"),
        ] {
            same_as_parse(&body);
        }
    }

    #[test]
    fn cached_fields_are_pushed_by_id_and_new_ones_by_key() {
        let options = Options::at(NOW_MS);
        let cache = SeriesCache::new(1000, 1 << 20);
        let series = b"cpu,host=a";
        let h = cache.prefix_hash(series);
        cache.insert(&cache.key(h, series, b"user"), SeriesId(41));
        let mut misses = Misses::default();
        let body = format!("cpu,host=a user=1,sys=2 {}\n", NOW_MS - 5);
        let mapped = map_body(
            body.as_bytes(),
            &options,
            Precision::Milliseconds,
            &cache,
            WriteBatch::new(),
            &mut misses,
        );
        assert_eq!(mapped.rejected_total, 0, "{:?}", mapped.rejected);
        assert_eq!(
            samples(&mapped.batch),
            vec![
                ("#41".to_owned(), NOW_MS - 5, store::Value::Numeric(1.0)),
                (
                    "cpu_sys|ST[host:a]".to_owned(),
                    NOW_MS - 5,
                    store::Value::Numeric(2.0)
                ),
            ]
        );
        assert!(!misses.is_empty());
    }

    #[test]
    fn series_written_once_are_pushed_by_id_the_next_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = store::Store::open(dir.path(), store::StoreOptions::default()).unwrap();
        let cache = SeriesCache::new(1000, 1 << 20);
        let options = Options::at(NOW_MS);
        let mut misses = Misses::default();
        let body = |ts: i64| {
            format!(
                "cpu,host=a user=1,sys=2 {ts}\ncpu,host=b user=3 {ts}\nmem,host=a x=\"t\" {ts}\n"
            )
        };
        let mapped = map_body(
            body(NOW_MS - 10).as_bytes(),
            &options,
            Precision::Milliseconds,
            &cache,
            WriteBatch::new(),
            &mut misses,
        );
        assert_eq!(mapped.accepted, 4);
        store.write_partial(&mapped.batch).unwrap();
        misses.learn(&store, &cache);
        assert_eq!(cache.len(), 4);
        let mapped = map_body(
            body(NOW_MS).as_bytes(),
            &options,
            Precision::Milliseconds,
            &cache,
            WriteBatch::new(),
            &mut misses,
        );
        let got = samples(&mapped.batch);
        assert_eq!(got.len(), 4);
        assert!(
            got.iter().all(|(key, _, _)| key.starts_with('#')),
            "{got:?}"
        );
        assert!(misses.is_empty());
        // Each id is the series' own: written by id, read back by key.
        store.write_partial(&mapped.batch).unwrap();
        for (key, id) in [("cpu_user|ST[host:a]", 0), ("cpu_sys|ST[host:a]", 1)] {
            let parsed = store::key::StreamKey::parse(key).unwrap();
            let found = store.index().lookup(&parsed).unwrap().unwrap();
            assert_eq!(found.0, SeriesId(id), "{key}");
            assert_eq!(got[id as usize].0, format!("#{id}"));
        }
    }

    #[test]
    fn a_cached_line_with_an_escaped_section_is_another_series() {
        // `t=a\ b` is not the bytes `t=a`: its own key, pushed by text.
        let options = Options::at(NOW_MS);
        let cache = SeriesCache::new(1000, 1 << 20);
        let series = b"m,t=a";
        cache.insert(
            &cache.key(cache.prefix_hash(series), series, b"v"),
            SeriesId(3),
        );
        let mut misses = Misses::default();
        let body = format!("m,t=a\\ b v=1 {NOW_MS}\nm,t=a v=2 {NOW_MS}\n");
        let mapped = map_body(
            body.as_bytes(),
            &options,
            Precision::Milliseconds,
            &cache,
            WriteBatch::new(),
            &mut misses,
        );
        let got = samples(&mapped.batch);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].0.starts_with("m_v|ST[t:"), "{got:?}");
        assert_eq!(got[1].0, "#3");
    }
}
