//! Where every parser puts what it reads: a [`Sink`]. Each protocol's `parse_into` hands its
//! accepted samples to a sink as a [`Series`] and a [`Point`] lending names, tags and values
//! from the body and the parser's scratch, and everything else as a rejection (a location built
//! on demand and a typed [`Reason`]). The owned [`Batch`] is one sink (what `parse` returns,
//! for tests, fuzzing and the CLI); `strata serve` writes through another straight into a store
//! batch (crate `insert`), and a future broker through one into its journal.
//!
//! What a sink may count on, from every parser:
//! - At most `SAMPLES_PER_BATCH_MAX` samples per body; the one after rejects the rest of it.
//! - Names and tags passed every check of the protocol (`FORMAT.md`), within the crate's
//!   bounds; the store's own key rules (its charset, empty values) are the sink's to apply.
//! - A [`Scope::Rest`] or [`Scope::Whole`] rejection is the last call: nothing of the body is
//!   to be stored.

use std::sync::Arc;

use hist::Histogram;

use crate::batch::{
    Batch, ExemplarOwned, MetadataOwned, MetricType, Mode, Reason, Sample, Tags, Value,
};
use crate::tags::suffix_tags_owned;

/// Receives one body's parse. Static dispatch: parsers are generic over their sink, so the
/// server's sink is inlined into each parser's loop.
pub trait Sink {
    /// Document `index` (from 0) starts: it holds `metrics` metrics (accepted or not) when the
    /// encoding says so up front (flatbuffers), 0 otherwise (JSON). Tag-list ids
    /// ([`TagsRef::List`]) are per document.
    fn document(&mut self, index: usize, metrics: usize) {
        let _ = (index, metrics);
    }

    /// A series as the bytes the client sent for it, asked before its tags are read (Influx, a
    /// line's fields; remote write, a series' labels): `Some` when the sink knows the series
    /// from such bytes (an earlier body). Its tags are then neither decoded nor checked
    /// ([`TagsRef::Unread`]), and its samples carry the answer ([`Lookup::Known`]).
    fn known_series(&mut self, raw: RawSeries<'_>) -> Option<Known> {
        let _ = raw;
        None
    }

    /// A series whose points follow as [`Sink::sample`]s with the same [`Series::index`], for a
    /// protocol whose series may carry several (remote write): the sink checks the series once.
    /// `false`: its points are not wanted (the sink rejected the series; the parser still
    /// checks them, so the body is refused for a malformed one as it would be otherwise).
    fn series(&mut self, series: &Series<'_>) -> bool {
        let _ = series;
        true
    }

    /// One accepted sample. `false` stops the parse (no further calls).
    fn sample(&mut self, series: &Series<'_>, point: Point<'_>) -> bool;

    /// A rejection: one sample, line, key, series or document ([`Scope::One`]), or the rest of
    /// the body or all of it (then the last call). `location` ("line 7, column 12", "document
    /// 2, key `a`b`") is built only if called: a body of a million bad lines must not cost a
    /// million strings.
    fn reject(&mut self, location: &dyn Fn() -> String, reason: Reason, scope: Scope);

    /// Point `at` of `series` (announced by [`Sink::series`]) is rejected alone. A sink that
    /// knows the series only by id ([`Lookup::Known`]: its name was not read) names it.
    fn reject_point(&mut self, series: &Series<'_>, at: PointAt, reason: Reason) {
        let location = || at.location(series.index.unwrap_or(0), &series.name);
        self.reject(&location, reason, Scope::One);
    }

    /// What the sender says a metric family is (remote write's metadata, OTLP's metric type,
    /// unit and description). Not a sample: it is neither counted nor rejected, and a sink that
    /// keeps no metadata ignores it.
    fn metadata(&mut self, metadata: &Metadata<'_>) {
        let _ = metadata;
    }

    /// An exemplar of a series whose points were handed over (remote write 1.0 and 2.0, OTLP
    /// points). Not a sample: it is neither counted nor rejected here; a sink that keeps no
    /// exemplars ignores it.
    fn exemplar(&mut self, exemplar: &Exemplar<'_>) {
        let _ = exemplar;
    }
}

/// One exemplar, lent from the body: a traced observation of a series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exemplar<'e> {
    /// The labels of the series it belongs to, `__name__` among them, as sent.
    pub series: &'e [(&'e str, &'e str)],
    /// Its own labels (`trace_id`, `span_id`, …); at most [`EXEMPLAR_LABEL_CHARS_MAX`]
    /// characters of names and values together.
    pub labels: &'e [(&'e str, &'e str)],
    pub value: f64,
    pub ts_ms: i64,
}

/// Characters of an exemplar's label names and values together, Prometheus's bound
/// (`ExemplarMaxLabelSetLength`); a longer exemplar is dropped.
pub const EXEMPLAR_LABEL_CHARS_MAX: usize = 128;

impl Exemplar<'_> {
    pub fn to_owned(&self) -> ExemplarOwned {
        let own = |l: &[(&str, &str)]| {
            l.iter()
                .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                .collect::<Vec<_>>()
        };
        ExemplarOwned {
            series: own(self.series),
            labels: own(self.labels),
            value: self.value,
            ts_ms: self.ts_ms,
        }
    }

    /// Whether its labels are within Prometheus's bound.
    pub fn labels_fit(labels: &[(&str, &str)]) -> bool {
        let chars: usize = labels
            .iter()
            .map(|(k, v)| k.chars().count() + v.chars().count())
            .sum();
        chars <= EXEMPLAR_LABEL_CHARS_MAX
    }
}

/// One metric family's metadata, lent from the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata<'m> {
    /// The family name: a metric name, or for a classic histogram or summary the name its
    /// `_bucket`, `_sum`, `_count` series share.
    pub family: &'m str,
    pub kind: MetricType,
    pub help: &'m str,
    pub unit: &'m str,
}

impl Metadata<'_> {
    pub fn to_owned(&self) -> MetadataOwned {
        MetadataOwned {
            family: self.family.to_owned(),
            kind: self.kind,
            help: self.help.to_owned(),
            unit: self.unit.to_owned(),
        }
    }
}

/// What a rejection covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One sample, line, key, series or document; the parse goes on.
    One,
    /// The parse stopped here (a syntax error, a bound): this and everything after it.
    Rest,
    /// The whole body, what was handed over before included (a body found malformed after
    /// part of it was read, as remote write's one-pass decoder finds it).
    Whole,
}

/// Where a rejected point is in its series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointAt {
    /// What the protocol calls it: "sample", "histogram".
    pub kind: &'static str,
    /// Counted per kind, from 0.
    pub index: usize,
}

impl PointAt {
    /// `series 3 (`name`), sample 2`.
    pub fn location(self, series: usize, name: &dyn std::fmt::Display) -> String {
        format!("series {series} (`{name}`), {} {}", self.kind, self.index)
    }
}

/// The bytes a client sent for a series, in two parts (Influx: the line's measurement and tag
/// section, then the field key; remote write: the labels, nothing; httptrap: the metric's name,
/// then its own `|ST[…]` text). Within one protocol, equal parts always mean the same series:
/// a sink may remember a series by them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawSeries<'r> {
    pub first: &'r [u8],
    pub second: &'r [u8],
}

/// A sink's token for a series it knows ([`Sink::known_series`]); opaque to parsers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known(pub u64);

/// Whether the parser asked the sink about a series' raw bytes, and the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Not asked ([`Series::raw`] may still be there for the sink to look up itself).
    NotAsked,
    /// Asked; the sink did not know it.
    Unknown,
    /// Asked; the sink's token.
    Known(Known),
}

/// A sample's series, lent.
#[derive(Clone, Copy, Debug)]
pub struct Series<'s> {
    /// Empty only for a series whose name was not read ([`Lookup::Known`], remote write).
    pub name: Name<'s>,
    pub tags: TagsRef<'s>,
    pub lookup: Lookup,
    /// The bytes the client sent for this series when they determine it alone (not for a
    /// httptrap metric that also carries tags from keys above it or `_tags`).
    pub raw: Option<RawSeries<'s>>,
    /// The series' position in the request (from 0), for a protocol whose rejections name
    /// series by it and whose series carry several points (remote write); `None` otherwise.
    pub index: Option<usize>,
}

/// A metric name, lent in one part or two (Influx's `<measurement>_<field>` is not in the body
/// as such: it is built only by a sink that needs the text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Name<'n> {
    pub head: &'n str,
    /// A second part and the character joining it to `head`.
    pub tail: Option<(char, &'n str)>,
}

impl<'n> Name<'n> {
    pub fn new(name: &'n str) -> Name<'n> {
        Name {
            head: name,
            tail: None,
        }
    }

    pub fn joined(head: &'n str, joint: char, tail: &'n str) -> Name<'n> {
        Name {
            head,
            tail: Some((joint, tail)),
        }
    }

    /// The name when it is in one part.
    pub fn as_str(&self) -> Option<&'n str> {
        match self.tail {
            None => Some(self.head),
            Some(_) => None,
        }
    }

    /// Appends the name to `out`.
    pub fn write_to(&self, out: &mut String) {
        out.push_str(self.head);
        if let Some((joint, tail)) = self.tail {
            out.push(joint);
            out.push_str(tail);
        }
    }

    /// The name in `scratch` (cleared first) unless it is in one part.
    pub fn text<'a>(&self, scratch: &'a mut String) -> &'a str
    where
        'n: 'a,
    {
        match self.as_str() {
            Some(name) => name,
            None => {
                scratch.clear();
                self.write_to(scratch);
                scratch
            }
        }
    }
}

impl std::fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.head)?;
        if let Some((joint, tail)) = self.tail {
            write!(f, "{joint}{tail}")?;
        }
        Ok(())
    }
}

/// A series' stream tags, lent in the form the parser has them.
#[derive(Clone, Copy, Debug)]
pub enum TagsRef<'t> {
    /// A list in the order given (`b"…"` parts decoded). Equal `id`s within one document mean
    /// equal lists: a sink checks and prints a list once per id, not per sample. Flatbuffers: the
    /// same tag set, or the same name's suffix tags with it; JSON: the same `|ST[…]` tags of the
    /// keys above the value (there an id, once another has followed it, does not come back
    /// within the document); Influx: the same tag section; others: the same shared list.
    List { id: u64, tags: &'t Tags },
    /// The `cat:val,…` text of a name's `|ST[…]` suffix, lent unsplit: it passed every check,
    /// no part is written as `b"…"`, and its tags are `key::suffix::suffix_tags(text)` (a tag
    /// list per stream is then neither copied nor kept).
    Suffix(&'t str),
    /// Prometheus labels as sent, `__name__` included (remote write): a label with an empty
    /// value means no tag, and the tags are the label view's (`key::TagSet::from_labels`).
    Labels(&'t [(&'t str, &'t str)]),
    /// Not read: the sink knows the series ([`Lookup::Known`]).
    Unread,
}

/// A sample's time, value and mode.
#[derive(Debug)]
pub struct Point<'p> {
    /// Milliseconds since the epoch, checked against the options' window; `None` = at receipt.
    pub ts_ms: Option<i64>,
    pub value: ValueRef<'p>,
    pub mode: Mode,
}

/// A sample's value, borrowed where the body or the reader's scratch holds it.
#[derive(Debug)]
pub enum ValueRef<'v> {
    Null,
    Numeric(f64),
    Text(&'v str),
    Histogram(HistogramRef<'v>),
    CumulativeHistogram(HistogramRef<'v>),
    /// A running total in the sender's own buckets ([`Value::Cumulative`]).
    Cumulative(hist::convert::Cumulative),
}

impl ValueRef<'_> {
    /// The owned value.
    #[inline]
    pub fn into_value(self) -> Value {
        match self {
            ValueRef::Null => Value::Null,
            ValueRef::Numeric(v) => Value::Numeric(v),
            ValueRef::Text(text) => Value::Text(text.to_owned()),
            ValueRef::Histogram(h) => Value::Histogram(h.into_histogram()),
            ValueRef::CumulativeHistogram(h) => Value::CumulativeHistogram(h.into_histogram()),
            ValueRef::Cumulative(c) => Value::Cumulative(c),
        }
    }
}

/// A histogram value: storage-order keys and counts (strictly ascending valid keys, counts
/// above zero, as `Histogram::from_sorted_keys` takes them), bins the reader packed as it read
/// them (checked as they were: the store copies them as they are), or one the reader had to
/// build (bins out of order or repeated, or an llhist part).
#[derive(Debug)]
pub enum HistogramRef<'h> {
    Sorted { keys: &'h [u16], counts: &'h [u64] },
    Packed(hist::packed::PackedRef<'h>),
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

impl Series<'_> {
    /// The owned name and tags a [`Sample`] carries (remote write's labels without `__name__`,
    /// a lent suffix split).
    pub fn to_owned_parts(&self) -> (String, Tags) {
        let tags = match self.tags {
            TagsRef::List { tags, .. } => Arc::clone(tags),
            TagsRef::Suffix(text) => suffix_tags_owned(text).collect(),
            TagsRef::Labels(labels) => labels
                .iter()
                .filter(|(key, _)| *key != "__name__")
                .map(|&(key, value)| (key.to_owned(), value.to_owned()))
                .collect(),
            TagsRef::Unread => Tags::default(),
        };
        (self.name.to_string(), tags)
    }
}

/// The owned batch as a sink: every sample copied out, rejections listed as `parse` lists them.
impl Sink for Batch {
    fn document(&mut self, _index: usize, metrics: usize) {
        // One allocation for the document's samples (a count given up front is bounded by the
        // body: flatbuffer metrics are 6 body bytes each).
        let room = crate::SAMPLES_PER_BATCH_MAX.saturating_sub(self.samples.len());
        self.samples.reserve(metrics.min(room));
    }

    #[inline]
    fn sample(&mut self, series: &Series<'_>, point: Point<'_>) -> bool {
        let (name, tags) = series.to_owned_parts();
        self.samples.push(Sample {
            name,
            tags,
            ts_ms: point.ts_ms,
            value: point.value.into_value(),
            mode: point.mode,
        });
        true
    }

    fn metadata(&mut self, metadata: &Metadata<'_>) {
        if self.metadata.len() < crate::batch::METADATA_PER_BATCH_MAX {
            self.metadata.push(metadata.to_owned());
        }
    }

    fn exemplar(&mut self, exemplar: &Exemplar<'_>) {
        if self.exemplars.len() < crate::batch::EXEMPLARS_PER_BATCH_MAX {
            self.exemplars.push(exemplar.to_owned());
        }
    }

    fn reject(&mut self, location: &dyn Fn() -> String, reason: Reason, scope: Scope) {
        match scope {
            Scope::One => self.reject_one(location, reason),
            Scope::Rest => self.reject_rest(location, reason),
            Scope::Whole => {
                *self = Batch::default();
                self.reject_rest(location, reason);
            }
        }
    }
}
