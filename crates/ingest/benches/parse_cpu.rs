//! Samples parsed per CPU-second of the parsing thread, for each payload in `payloads` — the
//! unit of the ingest targets, and steadier than wall time on a shared machine (time spent
//! waiting for the CPU is not counted). CPU time: `clock::thread_cpu_ns` (CLOCK_THREAD_CPUTIME_ID).
//!
//! Run: `taskset -c 1 cargo bench -p ingest --bench parse_cpu` (`ROUNDS`, `CPU_SECONDS` tune it;
//! `CASE` picks payloads by name).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod payloads;

use std::hint::black_box;

/// Nanoseconds this thread has spent on a CPU.
fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this once, quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds = if quick {
        1
    } else {
        env_or("ROUNDS", 5.0) as usize
    };
    let cpu_seconds = if quick {
        0.01
    } else {
        env_or("CPU_SECONDS", 1.0)
    };
    println!(
        "payload | samples | bytes | samples per CPU-second (median of {rounds}) | all rounds"
    );
    // `CASE=<substring>` runs only the matching payloads (for profiling one of them).
    let only = std::env::var("CASE").unwrap_or_default();
    // (name, samples, bytes, median samples per CPU-second), for the comparisons below.
    let mut measured = Vec::new();
    for case in payloads::cases()
        .into_iter()
        .filter(|c| c.name.contains(&only))
    {
        let samples = (case.parse)(&case.body).samples.len() as f64;
        let median = median_rate(rounds, cpu_seconds, samples, &|| {
            black_box((case.parse)(black_box(&case.body)));
        });
        println!(
            "{} | {samples} | {} | {:.3} M | {}",
            case.name,
            case.body.len(),
            median.0 / 1e6,
            median.1
        );
        measured.push((case.name, samples, case.body.len(), median.0));
    }
    flat_vs_json(&measured, rounds, cpu_seconds);
}

/// Samples per CPU-second of `parse` (median of `rounds`), and every round as text.
fn median_rate(rounds: usize, cpu_seconds: f64, samples: f64, parse: &dyn Fn()) -> (f64, String) {
    let mut rates: Vec<f64> = (0..rounds)
        .map(|_| {
            let (start, mut parses) = (clock::thread_cpu_ns(), 0u64);
            let budget_ns = (cpu_seconds * 1e9) as u64;
            while clock::thread_cpu_ns() - start < budget_ns {
                parse();
                parses += 1;
            }
            samples * parses as f64 / ((clock::thread_cpu_ns() - start) as f64 / 1e9)
        })
        .collect();
    let all: Vec<String> = rates.iter().map(|r| format!("{:.2} M", r / 1e6)).collect();
    rates.sort_by(f64::total_cmp);
    (rates[rates.len() / 2], all.join(", "))
}

/// The target "the flatbuffers encoding vs the JSON httptrap encoding of the same metrics":
/// per pair of payloads holding the same metrics, decode ns per metric both ways, bytes, and the
/// ratios — for `flat::parse` (bytes to the same `Batch` as the JSON path), for reading the
/// flatbuffer in place without building samples, and (the row's honest definition) for both
/// decoded into the same product, a filled `store::WriteBatch` as strata serve writes it.
fn flat_vs_json(measured: &[(&str, f64, usize, f64)], rounds: usize, cpu_seconds: f64) {
    let find = |name: &str| measured.iter().find(|m| m.0 == name);
    let cases = payloads::cases();
    println!();
    println!(
        "JSON payload → flatbuffers payload | metrics | JSON ns/metric | flat::parse ns/metric \
         | speedup | in-place read ns/metric | speedup | JSON bytes | flat bytes | fewer bytes"
    );
    let mut into_store = Vec::new();
    for (json_name, flat_name) in payloads::FLAT_VS_JSON {
        let (Some(json), Some(flat)) = (find(json_name), find(flat_name)) else {
            continue;
        };
        assert_eq!(
            json.1, flat.1,
            "{json_name} and {flat_name} hold the same metrics"
        );
        let body = &cases.iter().find(|c| c.name == flat_name).unwrap().body;
        let json_body = &cases.iter().find(|c| c.name == json_name).unwrap().body;
        let read = median_rate(rounds, cpu_seconds, flat.1, &|| {
            black_box(payloads::flat_read_in_place(black_box(body)));
        });
        let (json_ns, flat_ns, read_ns) = (1e9 / json.3, 1e9 / flat.3, 1e9 / read.0);
        println!(
            "{json_name} → {flat_name} | {} | {json_ns:.1} | {flat_ns:.1} | {:.1}× | {read_ns:.1} \
             | {:.1}× | {} | {} | {:.1} %",
            json.1,
            json_ns / flat_ns,
            json_ns / read_ns,
            json.2,
            flat.2,
            100.0 * (1.0 - flat.2 as f64 / json.2 as f64)
        );
        // The same product both ways, checked before it is timed.
        let (from_json, from_flat) = (into_batch::json(json_body), into_batch::flat(body));
        assert_eq!(
            into_batch::rows(&from_json),
            into_batch::rows(&from_flat),
            "{json_name} and {flat_name} fill the same write batch"
        );
        assert_eq!(
            into_batch::rows(&from_json),
            into_batch::rows(&into_batch::json_visit(json_body)),
            "{json_name} parsed or visited fills the same write batch"
        );
        assert_eq!(
            from_json.samples().count() as f64,
            json.1,
            "every metric in the batch"
        );
        let json_store = median_rate(rounds, cpu_seconds, json.1, &|| {
            black_box(into_batch::json(black_box(json_body)));
        });
        let json_visit_store = median_rate(rounds, cpu_seconds, json.1, &|| {
            black_box(into_batch::json_visit(black_box(json_body)));
        });
        let flat_store = median_rate(rounds, cpu_seconds, flat.1, &|| {
            black_box(into_batch::flat(black_box(body)));
        });
        let owned_store = median_rate(rounds, cpu_seconds, flat.1, &|| {
            black_box(into_batch::flat_owned(black_box(body)));
        });
        into_store.push((
            json_name,
            flat_name,
            json.1,
            [json_store, json_visit_store, flat_store, owned_store],
        ));
    }
    println!();
    println!(
        "JSON payload → flatbuffers payload | metrics | JSON → WriteBatch ns/metric \
         | JSON visit → WriteBatch ns/metric (speedup) \
         | flat::parse + mapping → WriteBatch ns/metric (speedup) \
         | flat visit → WriteBatch ns/metric | speedup | rounds JSON | rounds JSON visit \
         | rounds flat visit"
    );
    for (json_name, flat_name, metrics, stores) in into_store {
        let [json_store, json_visit_store, flat_store, owned_store] = stores;
        let (json_ns, flat_ns) = (1e9 / json_store.0, 1e9 / flat_store.0);
        let (owned_ns, visit_ns) = (1e9 / owned_store.0, 1e9 / json_visit_store.0);
        println!(
            "{json_name} → {flat_name} | {metrics} | {json_ns:.1} | {visit_ns:.1} ({:.1}×) \
             | {owned_ns:.1} ({:.1}×) | {flat_ns:.1} | {:.1}× | {} | {} | {}",
            json_ns / visit_ns,
            json_ns / owned_ns,
            json_ns / flat_ns,
            json_store.1,
            json_visit_store.1,
            flat_store.1
        );
    }
}

/// Both httptrap encodings into a `store::WriteBatch` as strata serve fills one (with the
/// request's `__check` tag): JSON through `httptrap::parse` and the server's mapping (each
/// distinct tag list checked and printed once as a `TagSet`, each sample's key printed from
/// it), flatbuffers through `flat::parse_into` with a sink like the server's (crate `insert`:
/// one `TagSet` per tag set per document). Every payload
/// here uses mode `Set` and parses cleanly, so the rejection bookkeeping both paths also do
/// is left out of both.
mod into_batch {
    use std::collections::HashMap;
    use std::sync::Arc;

    use ingest::{
        httptrap, HistogramRef, Options, Point, Reason, Scope, Series, TagsRef, ValueRef,
    };
    use store::key::{Tag, TagSet};
    use store::WriteBatch;

    use super::payloads::NOW_MS;

    fn check_tag() -> Tag {
        Tag::new("__check", "bench-check").unwrap()
    }

    /// The batch's samples as (key, timestamp, value), to compare two batches.
    pub fn rows(batch: &WriteBatch) -> Vec<(String, i64, store::Value)> {
        batch
            .samples()
            .map(|(key, ts_ms, value)| {
                let store::KeyRef::Text(key) = key else {
                    panic!("keys are printed as text");
                };
                (key.to_owned(), ts_ms, value.into_owned())
            })
            .collect()
    }

    fn tag_set<'a>(
        tags: impl Iterator<Item = &'a (String, String)>,
        extra: &'a [Tag],
    ) -> Result<TagSet, String> {
        let pairs = tags
            .map(|(c, v)| (c.as_bytes(), v.as_bytes()))
            .chain(extra.iter().map(|t| (t.category(), t.value())));
        TagSet::new(pairs).map_err(|e| e.to_string())
    }

    /// `httptrap::parse`, then the server's `mapping::map_batch` for mode `Set` samples.
    pub fn json(body: &[u8]) -> WriteBatch {
        owned(httptrap::parse(body, &Options::at(NOW_MS)))
    }

    /// `flat::parse`, then the mapping: strata serve's flatbuffers path before it read bodies
    /// straight into the batch.
    pub fn flat_owned(body: &[u8]) -> WriteBatch {
        owned(ingest::flat::parse(body, &Options::at(NOW_MS)))
    }

    /// The server's `mapping::map_batch` for mode `Set` samples.
    fn owned(batch: ingest::Batch) -> WriteBatch {
        assert!(batch.rejected.is_empty());
        let extra = [check_tag()];
        let mut out = WriteBatch::default();
        // Tag sets by tag list pointer, the last one first (as the server's `TagSets`).
        let mut last: Option<(ingest::Tags, usize)> = None;
        let mut by_ptr: HashMap<usize, usize> = HashMap::new();
        let mut sets: Vec<Result<TagSet, String>> = Vec::new();
        let mut pinned: Vec<ingest::Tags> = Vec::new();
        let mut key = String::new();
        for sample in batch.samples {
            let value = match sample.value {
                ingest::Value::Null => continue,
                ingest::Value::Numeric(v) => store::Value::Numeric(v),
                ingest::Value::Text(t) => store::Value::Text(t),
                ingest::Value::Histogram(h) => store::Value::Histogram(h),
                ingest::Value::CumulativeHistogram(h) => {
                    store::Value::CumulativeHistogram(hist::convert::Cumulative::Bins(h))
                }
                ingest::Value::Cumulative(c) => store::Value::CumulativeHistogram(c),
            };
            let at = match &last {
                Some((tags, at)) if Arc::ptr_eq(tags, &sample.tags) => *at,
                _ => {
                    let ptr = Arc::as_ptr(&sample.tags) as *const () as usize;
                    let at = *by_ptr.entry(ptr).or_insert_with(|| {
                        sets.push(tag_set(sample.tags.iter(), &extra));
                        pinned.push(sample.tags.clone());
                        sets.len() - 1
                    });
                    last = Some((sample.tags.clone(), at));
                    at
                }
            };
            key.clear();
            let set = sets[at].as_ref().unwrap();
            set.write_key(&sample.name, &mut key).unwrap();
            let ts_ms = sample.ts_ms.unwrap_or(NOW_MS);
            out.push_canonical(&key, ts_ms, value).unwrap();
        }
        out
    }

    /// `flat::parse_into` straight into the batch.
    pub fn flat(body: &[u8]) -> WriteBatch {
        let extra = [check_tag()];
        let mut writer = Writer::new(&extra, false);
        ingest::flat::parse_into(body, &Options::at(NOW_MS), &mut writer);
        writer.batch
    }

    /// `httptrap::parse_into` straight into the batch: strata serve's JSON path.
    pub fn json_visit(body: &[u8]) -> WriteBatch {
        let extra = [check_tag()];
        let mut writer = Writer::new(&extra, true);
        httptrap::parse_into(body, &Options::at(NOW_MS), &mut writer);
        writer.batch
    }

    struct Writer<'t> {
        extra: &'t [Tag],
        batch: WriteBatch,
        /// This document's tag sets by `tags_id` (all below 2^16 in these payloads), or only
        /// the last one (JSON: an id does not come back once another followed).
        sets: Vec<Option<Result<TagSet, String>>>,
        last_only: bool,
        /// The id of the one set kept when `last_only`.
        last_id: Option<u64>,
        key: String,
    }

    impl<'t> Writer<'t> {
        fn new(extra: &'t [Tag], last_only: bool) -> Writer<'t> {
            Writer {
                extra,
                batch: WriteBatch::default(),
                sets: Vec::new(),
                last_only,
                last_id: None,
                key: String::new(),
            }
        }

        /// The slot of `tags_id` in `sets`.
        fn slot(&mut self, tags_id: u64) -> usize {
            if self.last_only {
                if self.last_id != Some(tags_id) {
                    self.sets.clear();
                    self.sets.push(None);
                    self.last_id = Some(tags_id);
                }
                return 0;
            }
            let at = usize::try_from(tags_id).unwrap();
            if self.sets.len() <= at {
                self.sets.resize(at + 1, None);
            }
            at
        }
    }

    impl ingest::Sink for Writer<'_> {
        fn document(&mut self, _index: usize, _metrics: usize) {
            self.sets.clear();
            self.last_id = None;
        }

        fn sample(&mut self, series: &Series<'_>, point: Point<'_>) -> bool {
            // As the server: bins lent sorted or packed go into the batch as they are.
            let mut lent = None;
            let value = match point.value {
                ValueRef::Null => return true,
                ValueRef::Numeric(v) => store::Value::Numeric(v),
                ValueRef::Text(t) => store::Value::Text(t.to_owned()),
                ValueRef::Histogram(HistogramRef::Packed(bins)) => {
                    lent = Some(HistogramRef::Packed(bins));
                    store::Value::Numeric(0.0)
                }
                ValueRef::Histogram(HistogramRef::Sorted { keys, counts }) => {
                    lent = Some(HistogramRef::Sorted { keys, counts });
                    store::Value::Numeric(0.0)
                }
                ValueRef::Histogram(h) => store::Value::Histogram(h.into_histogram()),
                ValueRef::CumulativeHistogram(h) => store::Value::CumulativeHistogram(
                    hist::convert::Cumulative::Bins(h.into_histogram()),
                ),
                ValueRef::Cumulative(c) => store::Value::CumulativeHistogram(c),
            };
            self.key.clear();
            let extra = self.extra;
            let name = series.name.head;
            match series.tags {
                TagsRef::Suffix(text) => {
                    // As the server: a stream's own tag list printed straight into its key.
                    let pairs = store::key::suffix::suffix_tags(text)
                        .map(|(c, v)| (c.as_bytes(), v.as_bytes()))
                        .chain(extra.iter().map(|t| (t.category(), t.value())));
                    store::key::write_key_with_tags(name, pairs, &mut self.key).unwrap();
                }
                TagsRef::List { id, tags } => {
                    let at = self.slot(id);
                    let set = self.sets[at].get_or_insert_with(|| tag_set(tags.iter(), extra));
                    let set = set.as_ref().unwrap();
                    set.write_key(name, &mut self.key).unwrap();
                }
                other => panic!("httptrap lends no {other:?}"),
            }
            let ts_ms = point.ts_ms.unwrap_or(NOW_MS);
            let batch = &mut self.batch;
            match lent {
                Some(HistogramRef::Packed(bins)) => {
                    batch.push_canonical_packed(&self.key, ts_ms, bins)
                }
                Some(HistogramRef::Sorted { keys, counts }) => {
                    batch.push_canonical_bins(&self.key, ts_ms, keys, counts)
                }
                _ => batch.push_canonical(&self.key, ts_ms, value),
            }
            .unwrap();
            true
        }

        fn reject(&mut self, location: &dyn Fn() -> String, reason: Reason, _scope: Scope) {
            panic!("{}: {reason}", location());
        }
    }
}
