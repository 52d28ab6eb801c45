//! The write batch: samples of any kind for any number of series, keyed by `StreamKey`.
//!
//! A batch groups its samples by series as they are added, so the write path resolves each
//! distinct key to a series id once per batch instead of once per sample.

use std::collections::HashMap;

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

/// A batch of samples for [`crate::Store::write`].
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    series: Vec<SeriesSamples>,
    slots: HashMap<StreamKey, usize>,
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
        if self.sample_count >= BATCH_SAMPLES_MAX {
            return Err(StoreError::BatchTooLarge);
        }
        if let Value::Text(text) = &value {
            if text.len() > TEXT_BYTES_MAX {
                return Err(StoreError::TextTooLong {
                    len_bytes: text.len(),
                });
            }
        }
        let kind = value.kind();
        let slot = match self.slots.get(key) {
            Some(&slot) => slot,
            None => {
                self.series.push(SeriesSamples {
                    key: key.clone(),
                    kind,
                    samples: Vec::new(),
                });
                self.slots.insert(key.clone(), self.series.len() - 1);
                self.series.len() - 1
            }
        };
        let series = &mut self.series[slot];
        if series.kind != kind {
            return Err(StoreError::KindMismatchInBatch {
                key: key.canonical(),
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
        self.sample_count = 0;
    }
}
