//! The write batch: samples of any kind for any number of series, keyed by `StreamKey`.
//!
//! A batch groups its samples by series as they are added, so the write path resolves each
//! distinct key to a series id once per batch instead of once per sample.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use hist::Histogram;

use crate::index::Kind;
use crate::key::StreamKey;
use crate::StoreError;

/// Samples in one batch, bounded so one batch fits one journal record comfortably.
pub const BATCH_SAMPLES_MAX: usize = 1 << 20;
/// Longest text value, in bytes.
pub const TEXT_BYTES_MAX: usize = 64 << 10;

/// One submitted value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Numeric(f64),
    Text(String),
    /// Observations made at this sample's time; merged into the sample's base period.
    Histogram(Histogram),
    /// A running total since the source started: the store keeps the difference from the
    /// series' previous cumulative submission (or the whole value after a counter reset).
    CumulativeHistogram(Histogram),
}

impl Value {
    pub fn kind(&self) -> Kind {
        match self {
            Value::Numeric(_) => Kind::Numeric,
            Value::Text(_) => Kind::Text,
            Value::Histogram(_) | Value::CumulativeHistogram(_) => Kind::Histogram,
        }
    }
}

/// The samples of one series within a batch, in the order they were added.
#[derive(Clone, Debug)]
pub struct SeriesSamples {
    pub key: StreamKey,
    pub kind: Kind,
    pub samples: Vec<(i64, Value)>,
}

/// Ends a chain in [`WriteBatch::next_same_hash`].
const CHAIN_END: usize = usize::MAX;

/// A batch of samples for [`crate::Store::write`].
///
/// Each key is stored once, in its series: the lookup map goes from the key's hash to the first
/// series with that hash, and series with equal hashes are chained. (A map keyed by the key
/// itself would keep a second copy of every key — about two dozen allocations each — to build,
/// hash and free per series per batch.)
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    series: Vec<SeriesSamples>,
    /// Key hash → first slot with that hash.
    slots: HashMap<u64, usize>,
    /// Per slot, the next slot with the same key hash, or `CHAIN_END`.
    next_same_hash: Vec<usize>,
    hasher: RandomState,
    sample_count: usize,
}

impl WriteBatch {
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    pub fn numeric(&mut self, key: &StreamKey, ts_ms: i64, value: f64) -> Result<(), StoreError> {
        self.push(key, ts_ms, Value::Numeric(value))
    }

    pub fn text(&mut self, key: &StreamKey, ts_ms: i64, value: &str) -> Result<(), StoreError> {
        self.push(key, ts_ms, Value::Text(value.to_owned()))
    }

    pub fn histogram(
        &mut self,
        key: &StreamKey,
        ts_ms: i64,
        value: &Histogram,
    ) -> Result<(), StoreError> {
        self.push(key, ts_ms, Value::Histogram(value.clone()))
    }

    pub fn cumulative_histogram(
        &mut self,
        key: &StreamKey,
        ts_ms: i64,
        value: &Histogram,
    ) -> Result<(), StoreError> {
        self.push(key, ts_ms, Value::CumulativeHistogram(value.clone()))
    }

    /// Adds one sample. A key keeps one kind within a batch (and for life, in the index).
    pub fn push(&mut self, key: &StreamKey, ts_ms: i64, value: Value) -> Result<(), StoreError> {
        self.push_slot(key, ts_ms, value).map(|_| ())
    }

    /// [`WriteBatch::push`], returning the key's slot for [`WriteBatch::push_at`].
    pub fn push_slot(
        &mut self,
        key: &StreamKey,
        ts_ms: i64,
        value: Value,
    ) -> Result<usize, StoreError> {
        check(self.sample_count, &value)?;
        let kind = value.kind();
        let hash = self.hasher.hash_one(key);
        let mut at = self.slots.get(&hash).copied().unwrap_or(CHAIN_END);
        // Bounded: a chain holds only slots of this batch.
        while at != CHAIN_END && self.series[at].key != *key {
            at = self.next_same_hash[at];
        }
        let slot = if at == CHAIN_END {
            let slot = self.series.len();
            self.series.push(SeriesSamples {
                key: key.clone(),
                kind,
                samples: Vec::new(),
            });
            // The new slot heads its hash's chain.
            let previous = self.slots.insert(hash, slot).unwrap_or(CHAIN_END);
            self.next_same_hash.push(previous);
            slot
        } else {
            at
        };
        self.push_at(slot, ts_ms, value)?;
        Ok(slot)
    }

    /// Adds one sample to the series in `slot` (from [`WriteBatch::push_slot`] on this batch)
    /// without looking its key up again. Panics if the slot is not one of this batch's.
    pub fn push_at(&mut self, slot: usize, ts_ms: i64, value: Value) -> Result<(), StoreError> {
        check(self.sample_count, &value)?;
        assert!(slot < self.series.len(), "slot {slot} is not in this batch");
        let series = &mut self.series[slot];
        if series.kind != value.kind() {
            return Err(StoreError::KindMismatchInBatch {
                key: series.key.canonical(),
            });
        }
        series.samples.push((ts_ms, value));
        self.sample_count += 1;
        Ok(())
    }

    pub fn series(&self) -> &[SeriesSamples] {
        &self.series
    }

    pub fn sample_count(&self) -> usize {
        self.sample_count
    }

    pub fn is_empty(&self) -> bool {
        self.sample_count == 0
    }

    pub fn clear(&mut self) {
        self.series.clear();
        self.slots.clear();
        self.next_same_hash.clear();
        self.sample_count = 0;
    }
}

/// The per-sample bounds: batch size and text length.
fn check(sample_count: usize, value: &Value) -> Result<(), StoreError> {
    if sample_count >= BATCH_SAMPLES_MAX {
        return Err(StoreError::BatchTooLarge);
    }
    if let Value::Text(text) = value {
        if text.len() > TEXT_BYTES_MAX {
            return Err(StoreError::TextTooLong {
                len_bytes: text.len(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::key::Tag;

    fn key(host: &str) -> StreamKey {
        StreamKey::new("m", [Tag::new("host", host).unwrap()]).unwrap()
    }

    #[test]
    fn equal_keys_share_a_series_and_slots_skip_the_lookup() {
        let mut batch = WriteBatch::new();
        let a = batch.push_slot(&key("a"), 1, Value::Numeric(1.0)).unwrap();
        let b = batch.push_slot(&key("b"), 1, Value::Numeric(2.0)).unwrap();
        assert_ne!(a, b);
        // A separately built equal key finds the same series.
        assert_eq!(
            batch.push_slot(&key("a"), 2, Value::Numeric(3.0)).unwrap(),
            a
        );
        batch.push_at(b, 5, Value::Numeric(4.0)).unwrap();
        let err = batch.push_at(a, 6, Value::Text("x".into())).unwrap_err();
        assert!(
            matches!(err, StoreError::KindMismatchInBatch { .. }),
            "{err:?}"
        );
        let err = batch
            .push(&key("b"), 7, Value::Text("x".into()))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::KindMismatchInBatch { .. }),
            "{err:?}"
        );
        assert_eq!(batch.series().len(), 2);
        assert_eq!(batch.sample_count(), 4);
        let got: Vec<(String, Vec<i64>)> = batch
            .series()
            .iter()
            .map(|s| (s.key.canonical(), s.samples.iter().map(|p| p.0).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("m|ST[host:a]".to_owned(), vec![1, 2]),
                ("m|ST[host:b]".to_owned(), vec![1, 5]),
            ]
        );
        batch.clear();
        assert!(batch.is_empty());
        assert_eq!(
            batch.push_slot(&key("b"), 1, Value::Numeric(0.0)).unwrap(),
            0
        );
    }

    #[test]
    fn too_long_text_adds_no_series() {
        let mut batch = WriteBatch::new();
        let long = "x".repeat(TEXT_BYTES_MAX + 1);
        let err = batch.text(&key("a"), 1, &long).unwrap_err();
        assert!(matches!(err, StoreError::TextTooLong { .. }), "{err:?}");
        assert!(batch.series().is_empty());
    }
}
