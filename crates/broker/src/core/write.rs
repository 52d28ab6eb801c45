//! One broker record into the core's store, with its origin (broker id, epoch, record number)
//! so that a record delivered any number of times is applied once. Modes combine within the
//! record as `strata serve` combines them within one body: `Set` replaces, `Accumulate` adds,
//! `Average` is the mean of the averages since the last `Set`.

use std::collections::HashMap;

use store::key::{StreamKey, Tag};
use store::{Origin, SourceId, Store, StoreError, Value, WriteBatch, Written};

use crate::record::{self, Mode, Record, Sample};

/// What writing one record did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub samples: usize,
    /// Samples left out: a key the store refuses, a kind clash.
    pub rejected: usize,
    /// The record had been applied before (a resend).
    pub duplicate: bool,
    /// The record could not be read at all (counted, never retried).
    pub undecodable: bool,
    /// Time the broker made the record (ms), for the lag.
    pub made_ms: i64,
}

/// Why a record was not written: retry later (`Retry`), or never (`Skip`, counted).
#[derive(Debug)]
pub enum WriteError {
    Retry(String),
    Skip(String),
}

/// Writes one record (blocking: call on the blocking pool).
pub fn write_record(
    store: &Store,
    source: &SourceId,
    epoch: u64,
    seq: u64,
    bytes: &[u8],
) -> Result<Outcome, WriteError> {
    let record = match record::decode(bytes) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(source = %source, seq, error = %e, "an unreadable record skipped");
            return Ok(Outcome {
                undecodable: true,
                ..Outcome::default()
            });
        }
    };
    let (mut batch, mut outcome) = to_batch(&record);
    outcome.made_ms = record.made_ms;
    if batch.is_empty() {
        return Ok(outcome);
    }
    batch.set_origin(Some(Origin {
        source: source.clone(),
        epoch,
        seq,
        received_ms: (clock::wall() / 1_000_000) as i64,
    }));
    match store.write_partial(&batch) {
        Ok((Written::Duplicate, _)) => outcome.duplicate = true,
        Ok((Written::Applied, rejected)) => {
            outcome.rejected += rejected.iter().map(|r| r.samples).sum::<usize>();
            outcome.samples -= rejected
                .iter()
                .map(|r| r.samples)
                .sum::<usize>()
                .min(outcome.samples);
        }
        Err(e @ (StoreError::StaleEpoch { .. } | StoreError::TooManySources { .. })) => {
            return Err(WriteError::Skip(e.to_string()))
        }
        Err(e) => return Err(WriteError::Retry(e.to_string())),
    }
    Ok(outcome)
}

fn key_of(s: &Sample) -> Result<StreamKey, store::key::KeyError> {
    let tags: Result<Vec<Tag>, _> = s
        .tags
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(c, v)| Tag::new(c.as_bytes(), v.as_bytes()))
        .collect();
    StreamKey::new(s.name.clone(), tags?)
}

/// Numeric samples being combined: (value so far, averages since the last set).
struct Combined {
    value: f64,
    averaged: u32,
}

fn to_batch(record: &Record) -> (WriteBatch, Outcome) {
    let mut batch = WriteBatch::new();
    let mut outcome = Outcome::default();
    let combine = record
        .samples
        .iter()
        .any(|s| s.mode != Mode::Set && matches!(s.value, record::Value::Numeric(_)));
    let mut combined: HashMap<(String, i64), Combined> = HashMap::new();
    let mut order: Vec<(StreamKey, i64)> = Vec::new();
    for s in &record.samples {
        let key = match key_of(s) {
            Ok(k) => k,
            Err(_) => {
                outcome.rejected += 1;
                continue;
            }
        };
        let value = match &s.value {
            record::Value::Null => continue,
            record::Value::Numeric(v) if combine => {
                fold(&mut combined, &mut order, key, s.ts_ms, *v, s.mode);
                continue;
            }
            record::Value::Numeric(v) => Value::Numeric(*v),
            record::Value::Text(t) => Value::Text(t.clone()),
            record::Value::Histogram(h) => Value::Histogram(h.clone()),
            record::Value::Cumulative(c) => Value::CumulativeHistogram(c.clone()),
        };
        match batch.push(&key, s.ts_ms, value) {
            Ok(()) => outcome.samples += 1,
            Err(_) => outcome.rejected += 1,
        }
    }
    for (key, ts) in order {
        let Some(c) = combined.get(&(key.canonical(), ts)) else {
            continue;
        };
        match batch.push(&key, ts, Value::Numeric(c.value)) {
            Ok(()) => outcome.samples += 1,
            Err(_) => outcome.rejected += 1,
        }
    }
    (batch, outcome)
}

fn fold(
    combined: &mut HashMap<(String, i64), Combined>,
    order: &mut Vec<(StreamKey, i64)>,
    key: StreamKey,
    ts: i64,
    v: f64,
    mode: Mode,
) {
    let slot = (key.canonical(), ts);
    let c = match combined.get_mut(&slot) {
        Some(c) => c,
        None => {
            order.push((key, ts));
            combined.entry(slot).or_insert(Combined {
                value: 0.0,
                averaged: 0,
            })
        }
    };
    match mode {
        Mode::Set => {
            c.value = v;
            c.averaged = 0;
        }
        Mode::Accumulate => c.value += v,
        Mode::Average => {
            c.averaged += 1;
            c.value += (v - c.value) / f64::from(c.averaged);
        }
    }
}
