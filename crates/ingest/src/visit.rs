//! The borrowed form of a parse, shared by the httptrap encodings: a parser hands each accepted
//! metric to a [`Visitor`] as a [`Metric`] lending its name, tags and value from the body and
//! the parser's scratch, and each rejection as a location and a reason. `parse` is a visit with
//! a visitor building the owned [`Batch`]; the server's visitors write straight into a store
//! batch instead, without a `Sample` per metric.

use std::sync::Arc;

use hist::Histogram;

use crate::batch::{Batch, Mode, Reason, Sample, Tags, Value, SAMPLES_PER_BATCH_MAX};
pub use crate::tags::suffix_tags;
use crate::tags::suffix_tags_owned;

/// Receives a parse one metric at a time, borrowing from the body and the parser:
/// `flat::visit` and `httptrap::visit` call it, and their `parse` builds a [`Batch`] with one.
/// Names and text values are the body's bytes where they can be, tag lists are built once per
/// tag list per document and lent to every metric carrying it, and histograms whose bins arrive
/// in storage order (what encoders write) are lent as storage-order keys and counts.
pub trait Visitor {
    /// Document `index` (counted from 0) starts; it holds `metrics` metrics (accepted or not)
    /// when the encoding says so up front (flatbuffers), 0 when it does not (JSON). Every
    /// metric handed over afterwards belongs to it until the next call.
    fn document(&mut self, index: usize, metrics: usize) {
        let _ = (index, metrics);
    }

    /// One accepted metric; `false` stops the visit (no further calls).
    fn metric(&mut self, metric: Metric<'_>) -> bool;

    /// One rejected metric, or (`rest_of_body`, then the last call) the whole body or its rest.
    /// `location` says where, as `Rejection::location`; build it only if it is kept.
    fn reject(&mut self, location: &dyn Fn() -> String, reason: Reason, rest_of_body: bool);
}

/// One accepted metric, borrowed: every check of the parser passed.
#[derive(Debug)]
pub struct Metric<'m> {
    /// The name without its `|ST[…]` suffix (the suffix's tags are in `tags`, or in `suffix`).
    pub name: &'m str,
    /// Equal ids within one document mean equal `tags`: a visitor checks and prints a tag list
    /// once per id, not per metric. Flatbuffers: the same tag set, or the same name's suffix
    /// tags with it. JSON: the same `|ST[…]` tags of the keys above the value (no `_tags`);
    /// there an id, once another has followed it, does not come back within the document.
    pub tags_id: u64,
    /// The stream tags: the name suffix's, then the tag set's, as in the sample `parse` makes.
    pub tags: &'m Tags,
    /// The `cat:val,…` text of the name's `|ST[…]` suffix, when the parser lent it instead of
    /// putting its tags in `tags` (then empty): every check of the parser passed, no part is
    /// written as `b"…"`, and its tags are [`suffix_tags`]`(text)`. JSON leaves a value's own
    /// key suffix so when no key above it and no `_tags` carry tags (the common case: a tag
    /// list per stream is then neither copied nor kept).
    pub suffix: Option<&'m str>,
    pub ts_ms: Option<i64>,
    pub value: ValueRef<'m>,
    pub mode: Mode,
}

/// A metric's value, borrowed where the body or the reader's scratch holds it.
#[derive(Debug)]
pub enum ValueRef<'m> {
    Null,
    Numeric(f64),
    Text(&'m str),
    Histogram(HistogramRef<'m>),
    CumulativeHistogram(HistogramRef<'m>),
}

/// A histogram value: storage-order keys and counts (strictly ascending valid keys, counts
/// above zero, as `Histogram::from_sorted_keys` takes them), bins the reader packed as it read
/// them (checked as they were: the store copies them as they are), or one the reader had to
/// build (bins out of order or repeated, or an llhist part).
#[derive(Debug)]
pub enum HistogramRef<'m> {
    Sorted { keys: &'m [u16], counts: &'m [u64] },
    Packed(hist::packed::PackedRef<'m>),
    Built(Histogram),
}

impl HistogramRef<'_> {
    /// The histogram as an owned value.
    #[inline]
    pub fn into_histogram(self) -> Histogram {
        match self {
            HistogramRef::Sorted { keys, counts } => Histogram::from_sorted_keys(keys, counts),
            HistogramRef::Packed(bins) => bins.to_histogram(),
            HistogramRef::Built(histogram) => histogram,
        }
    }
}

impl Metric<'_> {
    /// The owned sample `parse` puts in its batch.
    #[inline]
    pub fn into_sample(self) -> Sample {
        let value = match self.value {
            ValueRef::Null => Value::Null,
            ValueRef::Numeric(v) => Value::Numeric(v),
            ValueRef::Text(text) => Value::Text(text.to_owned()),
            ValueRef::Histogram(h) => Value::Histogram(h.into_histogram()),
            ValueRef::CumulativeHistogram(h) => Value::CumulativeHistogram(h.into_histogram()),
        };
        let tags = match self.suffix {
            None => Arc::clone(self.tags),
            Some(text) => suffix_tags_owned(text)
                .chain(self.tags.iter().cloned())
                .collect(),
        };
        Sample {
            name: self.name.to_owned(),
            tags,
            ts_ms: self.ts_ms,
            value,
            mode: self.mode,
        }
    }
}

/// The [`Visitor`] behind `flat::parse` and `httptrap::parse`: owned samples and rejections.
#[derive(Default)]
pub(crate) struct BatchBuilder {
    pub batch: Batch,
}

impl Visitor for BatchBuilder {
    fn document(&mut self, _index: usize, metrics: usize) {
        // One allocation for the document's samples (a count given up front is bounded by the
        // body: flatbuffer metrics are 6 body bytes each).
        let room = SAMPLES_PER_BATCH_MAX.saturating_sub(self.batch.samples.len());
        self.batch.samples.reserve(metrics.min(room));
    }

    #[inline]
    fn metric(&mut self, metric: Metric<'_>) -> bool {
        self.batch.samples.push(metric.into_sample());
        true
    }

    fn reject(&mut self, location: &dyn Fn() -> String, reason: Reason, rest_of_body: bool) {
        if rest_of_body {
            self.batch.reject_rest(location, reason);
        } else {
            self.batch.reject(location, reason);
        }
    }
}
