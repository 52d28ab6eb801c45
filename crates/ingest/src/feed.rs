//! The sink side of the parsers that build each sample whole (statsd, Graphite, OTLP): a
//! [`Feed`] lends their owned samples to a [`Sink`], gives equal tag lists equal ids, and keeps
//! the batch bound every parser keeps.

use std::collections::HashMap;
use std::sync::Arc;

use crate::batch::{Reason, Sample, Tags, Value, SAMPLES_PER_BATCH_MAX};
use crate::sink::{HistogramRef, Lookup, Name, Point, Scope, Series, Sink, TagsRef, ValueRef};

/// Owned samples into a sink.
pub(crate) struct Feed<'s, S> {
    sink: &'s mut S,
    /// Samples handed over, against `SAMPLES_PER_BATCH_MAX`.
    handed: usize,
    ids: TagIds,
}

impl<'s, S: Sink> Feed<'s, S> {
    pub(crate) fn new(sink: &'s mut S) -> Feed<'s, S> {
        Feed {
            sink,
            handed: 0,
            ids: TagIds::default(),
        }
    }

    /// Hands one sample over; `false` (after a stopping rejection at `location`) once the
    /// batch is full, or when the sink stopped.
    pub(crate) fn push(&mut self, sample: Sample, location: impl Fn() -> String) -> bool {
        if self.handed >= SAMPLES_PER_BATCH_MAX {
            let reason = Reason::Bound {
                what: "samples in the batch",
                size: self.handed + 1,
                max: SAMPLES_PER_BATCH_MAX,
            };
            self.sink.reject(&location, reason, Scope::Rest);
            return false;
        }
        self.handed += 1;
        let Sample {
            name,
            tags,
            ts_ms,
            value,
            mode,
        } = sample;
        let series = Series {
            name: Name::new(&name),
            tags: TagsRef::List {
                id: self.ids.id(&tags),
                tags: &tags,
            },
            lookup: Lookup::NotAsked,
            raw: None,
            index: None,
        };
        let text: String;
        let value = match value {
            Value::Null => ValueRef::Null,
            Value::Numeric(v) => ValueRef::Numeric(v),
            Value::Text(owned) => {
                text = owned;
                ValueRef::Text(&text)
            }
            // Histograms move: the sink takes them as built.
            Value::Histogram(h) => ValueRef::Histogram(HistogramRef::Built(h)),
            Value::CumulativeHistogram(h) => ValueRef::CumulativeHistogram(HistogramRef::Built(h)),
            Value::Cumulative(c) => ValueRef::Cumulative(c),
        };
        self.sink.sample(&series, Point { ts_ms, value, mode })
    }

    /// Rejects one sample, line or metric.
    pub(crate) fn reject(&mut self, location: impl Fn() -> String, reason: Reason) {
        self.sink.reject(&location, reason, Scope::One);
    }

    /// What the sender says a metric family is (not a sample).
    pub(crate) fn metadata(&mut self, metadata: &crate::sink::Metadata<'_>) {
        self.sink.metadata(metadata);
    }

    /// An exemplar of a sample handed over (not a sample).
    pub(crate) fn exemplar(&mut self, exemplar: &crate::sink::Exemplar<'_>) {
        self.sink.exemplar(exemplar);
    }

    /// Rejects the whole body (the last call).
    pub(crate) fn reject_whole(&mut self, location: impl Fn() -> String, reason: Reason) {
        self.sink.reject(&location, reason, Scope::Whole);
    }
}

/// Ids for tag lists by their `Arc`: the previous sample's list is compared first, others are
/// found by pointer, each list kept alive here so that no pointer is reused by another list
/// meanwhile. Bounded by the samples of one body.
#[derive(Default)]
struct TagIds {
    last: Option<(Tags, u64)>,
    by_pointer: HashMap<usize, u64>,
    pinned: Vec<Tags>,
}

impl TagIds {
    fn id(&mut self, tags: &Tags) -> u64 {
        if let Some((last, id)) = &self.last {
            if Arc::ptr_eq(last, tags) {
                return *id;
            }
        }
        let pointer = Arc::as_ptr(tags) as *const () as usize;
        let id = match self.by_pointer.get(&pointer) {
            Some(&id) => id,
            None => {
                let id = self.pinned.len() as u64;
                self.pinned.push(Arc::clone(tags));
                self.by_pointer.insert(pointer, id);
                id
            }
        };
        self.last = Some((Arc::clone(tags), id));
        id
    }
}
