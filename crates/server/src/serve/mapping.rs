//! `ingest::Batch` → `store::WriteBatch`: stream keys, receipt time, modes combined within the
//! batch, and a rejection (naming the key) for whatever the store would refuse.
//!
//! Combining rule (documented in STATUS.md): within one batch, numeric samples of one stream
//! at one timestamp collapse into one value in input order — `Set` replaces, `Accumulate` adds
//! to the value so far, `Average` is the mean of the `Average` samples (weighted by count, one
//! each) since the last `Set`. Across batches nothing is combined: each batch's value is a
//! sample, and at the same millisecond the later acknowledged batch wins (the store's rule).

use std::collections::HashMap;

use ingest::{Mode, Sample};
use store::key::{StreamKey, Tag, TagSet};
use store::WriteBatch;

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

/// Samples whose batch a blocking-pool thread keeps for its next body (larger ones are dropped
/// after use, so one huge body does not pin its memory).
const RETAINED_BATCH_SAMPLES_MAX: usize = 100_000;

impl Mapped {
    /// The batch, emptied, for a blocking-pool thread to keep for its next body (a new one when
    /// it held more than `RETAINED_BATCH_SAMPLES_MAX` samples): once written, only the counts
    /// and rejections are read.
    pub fn take_batch_to_keep(&mut self) -> WriteBatch {
        let mut batch = std::mem::take(&mut self.batch);
        if batch.sample_count() > RETAINED_BATCH_SAMPLES_MAX {
            return WriteBatch::new();
        }
        batch.clear();
        batch
    }

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

/// Maps a parsed batch. Each sample's canonical key is printed straight into the write batch
/// from its name and its tag set (checked, sorted and printed once per distinct tag list, not
/// once per sample). Kinds are checked by the store when it writes ([`apply_kind_rejections`]).
pub fn map_batch(batch: ingest::Batch, now_ms: i64, extra_tags: &[Tag]) -> Mapped {
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
    // Only `Accumulate` and `Average` need numeric samples combined here: for `Set` the last
    // sample at a (stream, timestamp) wins, which is the store's own rule within a batch.
    let combining = batch
        .samples
        .iter()
        .any(|s| s.mode != Mode::Set && matches!(s.value, ingest::Value::Numeric(_)));
    let mut tag_sets = TagSets::default();
    let mut key = String::new();
    // Numeric slots (key, timestamp) in first-appearance order, when combining.
    let mut slots: Vec<(String, i64, Slot)> = Vec::new();
    let mut slot_of: HashMap<(String, i64), usize> = HashMap::new();
    for sample in batch.samples {
        let value = match sample.value {
            ingest::Value::Null => {
                out.accepted += 1;
                continue;
            }
            ingest::Value::Numeric(v) => store::Value::Numeric(v),
            ingest::Value::Text(t) => store::Value::Text(t),
            ingest::Value::Histogram(h) => store::Value::Histogram(h),
            ingest::Value::CumulativeHistogram(h) => {
                store::Value::CumulativeHistogram(hist::convert::Cumulative::Bins(h))
            }
        };
        key.clear();
        let written = tag_sets.get(&sample.tags, extra_tags).and_then(|set| {
            set.write_key(&sample.name, &mut key)
                .map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            out.reject(|| format!("metric `{}`: {e}", sample.name));
            continue;
        }
        let ts_ms = sample.ts_ms.unwrap_or(now_ms);
        match value {
            store::Value::Numeric(v) if combining => {
                let at = (std::mem::take(&mut key), ts_ms);
                match slot_of.get(&at) {
                    Some(&i) => combine(&mut slots[i].2, v, sample.mode),
                    None => {
                        let mut slot = Slot {
                            value: v,
                            average_sum: 0.0,
                            average_count: 0,
                        };
                        if sample.mode == Mode::Average {
                            slot.average_sum = v;
                            slot.average_count = 1;
                        }
                        slots.push((at.0.clone(), ts_ms, slot));
                        slot_of.insert(at, slots.len() - 1);
                    }
                }
                out.accepted += 1;
            }
            other => match out.batch.push_canonical(&key, ts_ms, other) {
                Ok(_) => out.accepted += 1,
                Err(e) => out.reject(|| format!("metric `{key}`: {e}")),
            },
        }
    }
    for (key, ts_ms, slot) in slots {
        let pushed = out
            .batch
            .push_canonical(&key, ts_ms, store::Value::Numeric(slot.value));
        if let Err(e) = pushed {
            out.accepted = out.accepted.saturating_sub(1);
            out.reject(|| format!("metric `{key}`: {e}"));
        }
    }
    out
}

/// Turns what the store refused (a key that exists with another kind) into rejections.
pub fn apply_kind_rejections(mapped: &mut Mapped, rejected: &[store::KindRejection]) {
    for r in rejected {
        mapped.accepted = mapped.accepted.saturating_sub(r.samples);
        for _ in 0..r.samples {
            mapped.reject(|| {
                format!(
                    "metric `{}`: is {} and cannot take a {} value",
                    r.key,
                    r.existing.name(),
                    r.requested.name()
                )
            });
        }
    }
}

/// The tag sets of one batch, by tag list. Samples of one Influx line or statsd packet share
/// one `Arc` of tags, so the previous sample's set is checked first; other lists are found by
/// pointer (each `Arc` kept alive here, so no pointer is reused by another list meanwhile).
#[derive(Default)]
struct TagSets {
    last: Option<(ingest::Tags, usize)>,
    by_ptr: HashMap<usize, usize>,
    sets: Vec<Result<TagSet, String>>,
    pinned: Vec<ingest::Tags>,
}

impl TagSets {
    fn get(&mut self, tags: &ingest::Tags, extra_tags: &[Tag]) -> Result<&TagSet, String> {
        let at = match &self.last {
            Some((last, at)) if std::sync::Arc::ptr_eq(last, tags) => *at,
            _ => {
                let ptr = std::sync::Arc::as_ptr(tags) as *const () as usize;
                let at = match self.by_ptr.get(&ptr) {
                    Some(&at) => at,
                    None => {
                        let pairs = tags
                            .iter()
                            .map(|(c, v)| (c.as_bytes(), v.as_bytes()))
                            .chain(extra_tags.iter().map(|t| (t.category(), t.value())));
                        self.sets
                            .push(TagSet::new(pairs).map_err(|e| e.to_string()));
                        self.pinned.push(tags.clone());
                        self.by_ptr.insert(ptr, self.sets.len() - 1);
                        self.sets.len() - 1
                    }
                };
                self.last = Some((tags.clone(), at));
                at
            }
        };
        self.sets[at].as_ref().map_err(Clone::clone)
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
            if let (store::KeyRef::Text(k), store::Value::Numeric(x)) = (key, &*v) {
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
        let mapped = map_batch(batch, 777, &[]);
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
        let mapped = map_batch(batch, 1, &[]);
        assert!(mapped.stopped && mapped.batch.is_empty());
        assert_eq!(
            mapped.rejected_status(),
            axum::http::StatusCode::PAYLOAD_TOO_LARGE
        );
        let syntax = ingest::httptrap::parse(b"{\"a\": ", &ingest::Options::at(1_800_000_000_000));
        let mapped = map_batch(syntax, 1, &[]);
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
        let mapped = map_batch(batch, 9, &[]);
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
        let mapped = map_batch(batch, 1, &[]);
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
