//! `ingest::Batch` → `store::WriteBatch`: stream keys, receipt time, modes combined within the
//! batch, and a rejection (naming the key) for whatever the store would refuse.
//!
//! Combining rule (documented in STATUS.md): within one batch, numeric samples of one stream
//! at one timestamp collapse into one value in input order — `Set` replaces, `Accumulate` adds
//! to the value so far, `Average` is the mean of the `Average` samples (weighted by count, one
//! each) since the last `Set`. Across batches nothing is combined: each batch's value is a
//! sample, and at the same millisecond the later acknowledged batch wins (the store's rule).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use ingest::{Mode, Sample};
use store::index::Kind;
use store::key::{StreamKey, Tag};
use store::{Store, WriteBatch};

/// Rejection messages kept per request; the rest are only counted.
pub const REJECTIONS_LISTED_MAX: usize = ingest::REJECTIONS_LISTED_MAX;

/// What a batch became.
#[derive(Default)]
pub struct Mapped {
    pub batch: WriteBatch,
    /// Samples accepted (including `null`s, which are present without a value).
    pub accepted: usize,
    /// Rejections listed (parser's first, then the mapping's), each "where: why".
    pub rejected: Vec<String>,
    /// Every rejection, listed or not.
    pub rejected_total: usize,
    /// True when the parser stopped: nothing of the batch is to be stored.
    pub stopped: bool,
    /// The parse stopped at a size bound (samples per batch, decoded size): a 413, not a 400.
    pub stopped_too_large: bool,
}

impl Mapped {
    fn reject(&mut self, message: impl FnOnce() -> String) {
        self.rejected_total += 1;
        if self.rejected.len() < REJECTIONS_LISTED_MAX {
            self.rejected.push(message());
        }
    }

    /// The status for a body with rejections: 413 when the parse stopped at a size bound, 400
    /// otherwise.
    pub fn rejected_status(&self) -> axum::http::StatusCode {
        if self.stopped_too_large {
            axum::http::StatusCode::PAYLOAD_TOO_LARGE
        } else {
            axum::http::StatusCode::BAD_REQUEST
        }
    }

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
}

/// The stream key of a sample plus extra tags (httptrap's `__check`).
pub fn stream_key(sample: &Sample, extra: &[Tag]) -> Result<StreamKey, String> {
    build_key(&sample.name, sample.tags.iter(), extra)
}

fn build_key<'a>(
    name: &str,
    tags: impl ExactSizeIterator<Item = &'a (String, String)>,
    extra: &[Tag],
) -> Result<StreamKey, String> {
    let mut all = Vec::with_capacity(tags.len() + extra.len());
    for (category, value) in tags {
        let tag = Tag::new(category.as_bytes(), value.as_bytes())
            .map_err(|e| format!("tag `{category}:{value}`: {e}"))?;
        all.push(tag);
    }
    all.extend(extra.iter().cloned());
    StreamKey::new(name, all).map_err(|e| e.to_string())
}

/// One numeric value being combined at (stream, timestamp).
struct Slot {
    value: f64,
    average_sum: f64,
    average_count: u64,
}

/// Maps a parsed batch. `store` is asked (in memory) for each distinct key's kind so a key that
/// exists with another kind is a rejection, not a failed write of the whole batch.
pub fn map_batch(
    batch: ingest::Batch,
    now_ms: i64,
    extra_tags: &[Tag],
    store: Option<&Store>,
) -> Mapped {
    let mut out = Mapped {
        stopped: batch.stopped(),
        stopped_too_large: batch
            .rejected
            .iter()
            .any(|r| r.rest_of_body && matches!(r.reason, ingest::Reason::Bound { .. })),
        ..Mapped::default()
    };
    for rejection in &batch.rejected {
        if out.rejected.len() < REJECTIONS_LISTED_MAX {
            out.rejected.push(rejection.to_string());
        }
    }
    out.rejected_total = batch.rejected_total;
    if out.stopped {
        return out;
    }
    let mut keys = KeyTable::default();
    // Numeric slots (key number, timestamp) in first-appearance order, so the batch keeps the
    // input order.
    let mut slots: Vec<(u32, i64, Slot)> = Vec::new();
    let mut slot_of: HashMap<(u32, i64), usize> = HashMap::new();
    for sample in batch.samples {
        if sample.value == ingest::Value::Null {
            out.accepted += 1;
            continue;
        }
        let value = match sample.value {
            ingest::Value::Null => continue,
            ingest::Value::Numeric(v) => store::Value::Numeric(v),
            ingest::Value::Text(t) => store::Value::Text(t),
            ingest::Value::Histogram(h) => store::Value::Histogram(h),
            ingest::Value::CumulativeHistogram(h) => store::Value::CumulativeHistogram(h),
        };
        let kind = value.kind();
        let n = match keys.number(sample.name, &sample.tags, extra_tags, kind, store) {
            Ok(n) => n,
            Err(e) => {
                out.reject(|| e);
                continue;
            }
        };
        let (key, known, _) = &keys.keys[n as usize];
        match known {
            None => {
                out.reject(|| {
                    format!(
                        "metric `{}`: rejected earlier in this body",
                        key.canonical()
                    )
                });
                continue;
            }
            Some(k) if *k != kind => {
                out.reject(|| {
                    format!(
                        "metric `{}`: is {} and cannot take a {} value",
                        key.canonical(),
                        k.name(),
                        kind.name()
                    )
                });
                continue;
            }
            Some(_) => {}
        }
        let ts_ms = sample.ts_ms.unwrap_or(now_ms);
        match value {
            store::Value::Numeric(v) => {
                match slot_of.get(&(n, ts_ms)) {
                    Some(&i) => combine(&mut slots[i].2, v, sample.mode),
                    None => {
                        slot_of.insert((n, ts_ms), slots.len());
                        let mut slot = Slot {
                            value: v,
                            average_sum: 0.0,
                            average_count: 0,
                        };
                        if sample.mode == Mode::Average {
                            slot.average_sum = v;
                            slot.average_count = 1;
                        }
                        slots.push((n, ts_ms, slot));
                    }
                }
                out.accepted += 1;
            }
            other => match keys.push(n, &mut out.batch, ts_ms, other) {
                Ok(()) => out.accepted += 1,
                Err(e) => out.reject(|| e),
            },
        }
    }
    for (n, ts_ms, slot) in slots {
        if let Err(e) = keys.push(n, &mut out.batch, ts_ms, store::Value::Numeric(slot.value)) {
            out.accepted = out.accepted.saturating_sub(1);
            out.reject(|| e);
        }
    }
    out
}

/// The distinct stream keys of one batch, numbered. Influx fields and statsd values share one
/// `Arc` of tags, so a key is first looked up by (tags pointer, name) — one string hash — and
/// built (tags copied and sorted) and checked against the index once per distinct pair.
#[derive(Default)]
struct KeyTable {
    /// (key, kind it has in the index or this batch — `None` when the index refused it —, and
    /// its slot in the write batch once it has one).
    keys: Vec<(StreamKey, Option<Kind>, Option<usize>)>,
    /// Key hash → first key number with that hash; equal hashes chain through `next_same_hash`.
    /// (Keyed by hash so each key is built once and not copied into the map.)
    by_hash: HashMap<u64, u32>,
    next_same_hash: Vec<u32>,
    hasher: RandomState,
    by_sample: HashMap<(usize, String), u32>,
    /// Keeps every tags `Arc` seen alive, so no pointer in `by_sample` is reused by another.
    pinned: Vec<ingest::Tags>,
}

/// Ends a chain in `KeyTable::next_same_hash`.
const CHAIN_END: u32 = u32::MAX;

impl KeyTable {
    fn number(
        &mut self,
        name: String,
        tags: &ingest::Tags,
        extra_tags: &[Tag],
        kind: Kind,
        store: Option<&Store>,
    ) -> Result<u32, String> {
        let ptr = std::sync::Arc::as_ptr(tags) as *const () as usize;
        let probe = (ptr, name);
        if let Some(&n) = self.by_sample.get(&probe) {
            return Ok(n);
        }
        let (ptr, name) = probe;
        let sample_tags = tags.iter();
        let key = build_key(&name, sample_tags, extra_tags)
            .map_err(|e| format!("metric `{name}`: {e}"))?;
        let hash = self.hasher.hash_one(&key);
        let mut at = self.by_hash.get(&hash).copied().unwrap_or(CHAIN_END);
        // Bounded: a chain holds only keys of this batch.
        while at != CHAIN_END && self.keys[at as usize].0 != key {
            at = self.next_same_hash[at as usize];
        }
        let n = if at != CHAIN_END {
            at
        } else {
            let known = match store.map(|s| s.index().lookup(&key)) {
                Some(Ok(found)) => Some(found.map(|(_, k)| k).unwrap_or(kind)),
                Some(Err(e)) => return Err(format!("metric `{}`: {e}", key.canonical())),
                None => Some(kind),
            };
            let n = u32::try_from(self.keys.len())
                .ok()
                .filter(|&n| n != CHAIN_END)
                .ok_or_else(|| "too many keys".to_owned())?;
            let previous = self.by_hash.insert(hash, n).unwrap_or(CHAIN_END);
            self.next_same_hash.push(previous);
            self.keys.push((key, known, None));
            n
        };
        if self
            .pinned
            .last()
            .is_none_or(|last| !std::sync::Arc::ptr_eq(last, tags))
        {
            self.pinned.push(tags.clone());
        }
        self.by_sample.insert((ptr, name), n);
        Ok(n)
    }

    /// Adds a sample of key `n` to the batch: by key the first time, then by its batch slot.
    fn push(
        &mut self,
        n: u32,
        batch: &mut WriteBatch,
        ts_ms: i64,
        value: store::Value,
    ) -> Result<(), String> {
        let (key, _, slot) = &mut self.keys[n as usize];
        let pushed = match *slot {
            Some(at) => batch.push_at(at, ts_ms, value),
            None => batch
                .push_slot(key, ts_ms, value)
                .map(|at| *slot = Some(at)),
        };
        pushed.map_err(|e| format!("metric `{}`: {e}", key.canonical()))
    }
}

fn combine(slot: &mut Slot, v: f64, mode: Mode) {
    match mode {
        Mode::Set => {
            slot.value = v;
            slot.average_sum = 0.0;
            slot.average_count = 0;
        }
        Mode::Accumulate => slot.value += v,
        Mode::Average => {
            slot.average_sum += v;
            slot.average_count += 1;
            slot.value = slot.average_sum / slot.average_count as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::Arc;

    fn sample(name: &str, ts_ms: Option<i64>, value: f64, mode: Mode) -> Sample {
        Sample {
            name: name.to_owned(),
            tags: Arc::from(vec![("host".to_owned(), "a".to_owned())]),
            ts_ms,
            value: ingest::Value::Numeric(value),
            mode,
        }
    }

    fn values(mapped: &Mapped) -> Vec<(String, i64, f64)> {
        let mut out = Vec::new();
        for (key, ts, v) in mapped.batch.samples() {
            if let (store::KeyRef::Text(k), store::Value::Numeric(x)) = (key, v) {
                out.push((k.to_owned(), ts, *x));
            }
        }
        out
    }

    #[test]
    fn modes_combine_per_stream_and_timestamp() {
        let batch = ingest::Batch {
            samples: vec![
                sample("c", None, 2.0, Mode::Accumulate),
                sample("c", None, 3.0, Mode::Accumulate),
                sample("avg", Some(1_000), 1.0, Mode::Average),
                sample("avg", Some(1_000), 4.0, Mode::Average),
                sample("g", None, 7.0, Mode::Set),
                sample("g", None, 1.0, Mode::Accumulate),
                sample("g", Some(5), 9.0, Mode::Set),
            ],
            ..ingest::Batch::default()
        };
        let mapped = map_batch(batch, 777, &[], None);
        assert_eq!(mapped.accepted, 7);
        assert_eq!(
            values(&mapped),
            vec![
                ("c|ST[host:a]".to_owned(), 777, 5.0),
                ("avg|ST[host:a]".to_owned(), 1_000, 2.5),
                ("g|ST[host:a]".to_owned(), 777, 8.0),
                ("g|ST[host:a]".to_owned(), 5, 9.0),
            ]
        );
    }

    #[test]
    fn a_stop_at_a_size_bound_is_413_and_stores_nothing() {
        let mut batch = ingest::Batch {
            samples: vec![sample("kept", None, 1.0, Mode::Set)],
            ..ingest::Batch::default()
        };
        batch.rejected.push(ingest::Rejection {
            location: "body".to_owned(),
            reason: ingest::Reason::Bound {
                what: "samples in the batch",
                size: 2,
                max: 1,
            },
            rest_of_body: true,
        });
        batch.rejected_total = 1;
        let mapped = map_batch(batch, 1, &[], None);
        assert!(mapped.stopped && mapped.batch.is_empty());
        assert_eq!(
            mapped.rejected_status(),
            axum::http::StatusCode::PAYLOAD_TOO_LARGE
        );
        let syntax = ingest::httptrap::parse(b"{\"a\": ", &ingest::Options::at(1_800_000_000_000));
        let mapped = map_batch(syntax, 1, &[], None);
        assert!(mapped.stopped);
        assert_eq!(
            mapped.rejected_status(),
            axum::http::StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn equal_tags_in_separate_lists_are_one_stream() {
        // httptrap gives each sample its own tag list; equal lists (in any order) are one key.
        let mut a = sample("n", None, 2.0, Mode::Accumulate);
        a.tags = Arc::from(vec![
            ("x".to_owned(), "1".to_owned()),
            ("host".to_owned(), "a".to_owned()),
        ]);
        let mut b = sample("n", None, 3.0, Mode::Accumulate);
        b.tags = Arc::from(vec![
            ("host".to_owned(), "a".to_owned()),
            ("x".to_owned(), "1".to_owned()),
        ]);
        let batch = ingest::Batch {
            samples: vec![a, b],
            ..ingest::Batch::default()
        };
        let mapped = map_batch(batch, 9, &[], None);
        assert_eq!(
            values(&mapped),
            vec![("n|ST[host:a,x:1]".to_owned(), 9, 5.0)]
        );
    }

    #[test]
    fn bad_key_and_kind_clash_are_rejections_naming_the_key() {
        let mut text = sample("t", None, 0.0, Mode::Set);
        text.value = ingest::Value::Text("x".to_owned());
        let mut empty_tag = sample("e", None, 1.0, Mode::Set);
        empty_tag.tags = Arc::from(vec![("cat".to_owned(), String::new())]);
        let batch = ingest::Batch {
            samples: vec![sample("t", None, 1.0, Mode::Set), text, empty_tag],
            ..ingest::Batch::default()
        };
        let mapped = map_batch(batch, 1, &[], None);
        assert_eq!(mapped.accepted, 1);
        assert_eq!(mapped.rejected_total, 2);
        assert!(
            mapped.rejected[0].contains("t|ST[host:a]"),
            "{:?}",
            mapped.rejected
        );
        assert!(mapped.rejected[1].contains("`e`"), "{:?}", mapped.rejected);
    }
}
