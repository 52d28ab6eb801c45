//! Prometheus remote write 1.0 (`POST /api/v1/write`): a snappy **block**-compressed protobuf
//! `prometheus.WriteRequest`. Float samples become numerics; native histograms (integer or float
//! counts, exponential schemas and custom bounds) become llhist histograms through
//! `hist::convert::from_native`; classic `_bucket{le}` series are ordinary float series and stay
//! numerics. Mapping and choices: `FORMAT.md`.
//!
//! A body that cannot be decompressed or decoded is rejected whole (`rest_of_body`: the server
//! answers 400, which senders do not retry); a bad series or sample is rejected alone, named.

use hist::convert::{self, Cumulative, NativeCounts, NativeHistogram, Span};
use prost::Message;

use crate::batch::MetricType;
use crate::batch::{check_name, check_tag, check_tag_count, Batch, Mode, Options, Reason, Sample};
use crate::batch::{TagList, Value, SAMPLES_PER_BATCH_MAX};
use crate::sink::{
    HistogramRef, Lookup, Metadata, Name, Point, PointAt, RawSeries, Scope, Series, Sink, TagsRef,
    ValueRef,
};
use crate::wire::{packed_varints, varint_elements, walk_wire, Field, Wire};

/// Decompressed body size: checked against the length snappy declares in its header before
/// anything is allocated, so a small body cannot claim gigabytes.
pub const DECOMPRESSED_BYTES_MAX: usize = 64 << 20;

/// Series in one request. Counted on the wire before decoding: prost turns an empty 2-byte
/// series into a 72-byte struct, so 64 MiB could otherwise become gigabytes.
pub const SERIES_PER_REQUEST_MAX: usize = 200_000;
/// Labels in one request, counted the same way (an empty 2-byte label decodes to 48 bytes).
pub const LABELS_PER_REQUEST_MAX: usize = 2_000_000;
/// Native-histogram buckets in one request: bucket deltas (packed varints, 1 byte on the wire
/// and 8 once decoded) and spans (an empty 2-byte span decodes to 8 bytes), counted on the wire
/// the same way, so they decode to at most 64 MiB. 10,000 histograms of 160 buckets are 1.6 M.
pub const BUCKETS_PER_REQUEST_MAX: usize = 8_000_000;

// Every float is a sample, as Prometheus stores it: NaN (an empty summary's quantiles), ±Inf,
// and Prometheus' stale marker — the NaN with bits 0x7ff0_0000_0000_0002, sent when a series
// disappears — kept with its exact bits (PromQL reads it as the end of the series; any other
// NaN is an ordinary value).

/// `Histogram.reset_hint` value `GAUGE`: the histogram is a snapshot, not a running total.
const RESET_HINT_GAUGE: i32 = 3;

/// The subset of upstream `prompb/remote.proto` and `prompb/types.proto` Strata reads, as prost
/// derive structs (no build script, no `protoc`). Field numbers are the upstream ones; fields
/// not listed here are skipped by the decoder as unknown fields; metadata is read
/// by the decoder alone (the reference decoder here has no use for it). Label
/// text is read as bytes so invalid UTF-8 rejects one series, not the whole body.
pub mod proto {
    /// `WriteRequest { repeated TimeSeries timeseries = 1; }` (metadata = 3 read by the decoder).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }

    /// `TimeSeries { labels = 1; samples = 2; exemplars = 3; histograms = 4; }`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub exemplars: Vec<Exemplar>,
        #[prost(message, repeated, tag = "4")]
        pub histograms: Vec<Histogram>,
    }

    /// `Exemplar { repeated Label labels = 1; double value = 2; int64 timestamp = 3; }` (ms).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Exemplar {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(double, tag = "2")]
        pub value: f64,
        #[prost(int64, tag = "3")]
        pub timestamp: i64,
    }

    /// `Label { string name = 1; string value = 2; }`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(bytes = "vec", tag = "1")]
        pub name: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub value: Vec<u8>,
    }

    /// `Sample { double value = 1; int64 timestamp = 2; }` (ms).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(double, tag = "1")]
        pub value: f64,
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }

    /// `BucketSpan { sint32 offset = 1; uint32 length = 2; }`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct BucketSpan {
        #[prost(sint32, tag = "1")]
        pub offset: i32,
        #[prost(uint32, tag = "2")]
        pub length: u32,
    }

    /// Native histogram, upstream field numbers 1–16.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Histogram {
        #[prost(oneof = "Count", tags = "1, 2")]
        pub count: Option<Count>,
        #[prost(double, tag = "3")]
        pub sum: f64,
        #[prost(sint32, tag = "4")]
        pub schema: i32,
        #[prost(double, tag = "5")]
        pub zero_threshold: f64,
        #[prost(oneof = "ZeroCount", tags = "6, 7")]
        pub zero_count: Option<ZeroCount>,
        #[prost(message, repeated, tag = "8")]
        pub negative_spans: Vec<BucketSpan>,
        #[prost(sint64, repeated, tag = "9")]
        pub negative_deltas: Vec<i64>,
        #[prost(double, repeated, tag = "10")]
        pub negative_counts: Vec<f64>,
        #[prost(message, repeated, tag = "11")]
        pub positive_spans: Vec<BucketSpan>,
        #[prost(sint64, repeated, tag = "12")]
        pub positive_deltas: Vec<i64>,
        #[prost(double, repeated, tag = "13")]
        pub positive_counts: Vec<f64>,
        /// `ResetHint { UNKNOWN = 0; YES = 1; NO = 2; GAUGE = 3; }`.
        #[prost(int32, tag = "14")]
        pub reset_hint: i32,
        #[prost(int64, tag = "15")]
        pub timestamp: i64,
        #[prost(double, repeated, tag = "16")]
        pub custom_values: Vec<f64>,
    }

    /// `oneof count { uint64 count_int = 1; double count_float = 2; }`.
    #[derive(Clone, Copy, PartialEq, prost::Oneof)]
    pub enum Count {
        #[prost(uint64, tag = "1")]
        CountInt(u64),
        #[prost(double, tag = "2")]
        CountFloat(f64),
    }

    /// `oneof zero_count { uint64 zero_count_int = 6; double zero_count_float = 7; }`.
    #[derive(Clone, Copy, PartialEq, prost::Oneof)]
    pub enum ZeroCount {
        #[prost(uint64, tag = "6")]
        ZeroCountInt(u64),
        #[prost(double, tag = "7")]
        ZeroCountFloat(f64),
    }
}

/// Which kind of point a series holds; its `name` is how rejections call it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointKind {
    /// A float sample (`TimeSeries.samples`).
    Sample,
    /// A native histogram (`TimeSeries.histograms`).
    Histogram,
}

impl PointKind {
    pub fn name(self) -> &'static str {
        match self {
            PointKind::Sample => "sample",
            PointKind::Histogram => "histogram",
        }
    }
}

/// Parses one remote write 1.0 body (snappy block format, as the HTTP body arrives).
pub fn parse(body: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_into(body, options, &mut batch);
    batch
}

/// [`parse`] into any sink.
pub fn parse_into<S: Sink>(body: &[u8], options: &Options, sink: &mut S) {
    match decompress(body) {
        Ok(raw) => parse_decompressed_into(&raw, options, sink),
        Err(reason) => reject_body(sink, reason),
    }
}

/// Parses an already decompressed `WriteRequest` (the fuzz targets reach the protobuf decoder
/// through it without having to produce valid snappy).
pub fn parse_decompressed(raw: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_decompressed_into(raw, options, &mut batch);
    batch
}

/// [`parse_decompressed`] into any sink: each series' labels lent from the body (its raw
/// bytes asked about first, [`Sink::known_series`]: a known series' labels are not decoded),
/// announced ([`Sink::series`]) and then its points. A body found malformed after some series
/// were handed over is rejected whole ([`Scope::Whole`]): the sink drops what it got.
pub fn parse_decompressed_into<S: Sink>(raw: &[u8], options: &Options, sink: &mut S) {
    // The decoder itself is compiled here once, not per sink: its wire walk is inlined into
    // one loop here, and a few calls per series through a `dyn` sink cost far less than the
    // walk's helpers called across crates (+1,000 instructions a series, measured).
    if let Err(reason) = feed(raw, options, sink) {
        reject_body(sink, reason);
    }
}

/// Rejects the body whole, as location `body`.
pub fn reject_body<S: Sink + ?Sized>(sink: &mut S, reason: Reason) {
    sink.reject(&|| "body".to_owned(), reason, Scope::Whole);
}

/// Decodes a decompressed `WriteRequest` into `sink`, checking the body's structure (as
/// prost would decode it) and the request bounds in the same pass. An `Err` — the body
/// rejected whole — may come after some series were handed over.
/// Past a bound nothing more is handed over, but the rest is still checked, so a body is
/// refused for a malformed field before a bound, as when it was checked first.
fn feed(raw: &[u8], options: &Options, sink: &mut dyn Sink) -> Result<(), Reason> {
    if raw.len() > DECOMPRESSED_BYTES_MAX {
        return Err(Reason::Bound {
            what: "decompressed body size in bytes",
            size: raw.len(),
            max: DECOMPRESSED_BYTES_MAX,
        });
    }
    let mut counts = Counts::default();
    let mut labels = Labels::default();
    let mut index = 0usize;
    let mut visiting = true;
    check_message(raw, request_fields, &mut |field, wire| {
        match (field, wire) {
            (1, Wire::Bytes(series)) => {
                counts.series += 1;
                visiting &= counts.over().is_none();
                if visiting {
                    visiting = feed_series(index, series, options, &mut labels, sink, &mut counts)?;
                } else {
                    check_series(series, &mut counts)?;
                }
                index += 1;
            }
            (3, Wire::Bytes(metadata)) => {
                let metadata = read_metadata(metadata)?;
                if visiting {
                    if let Some(metadata) = metadata {
                        sink.metadata(&metadata);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    counts.over().map_or(Ok(()), Err)
}

/// What a request holds, counted against the request bounds as it is read.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) series: usize,
    pub(crate) labels: usize,
    /// Samples and histograms.
    pub(crate) points: usize,
    /// Native histogram spans and integer bucket deltas.
    pub(crate) buckets: usize,
}

impl Counts {
    /// The first bound exceeded.
    pub(crate) fn over(&self) -> Option<Reason> {
        for (what, size, max) in [
            ("series in the request", self.series, SERIES_PER_REQUEST_MAX),
            ("labels in the request", self.labels, LABELS_PER_REQUEST_MAX),
            (
                "samples and histograms in the request",
                self.points,
                SAMPLES_PER_BATCH_MAX,
            ),
            (
                "native histogram buckets (deltas and spans) in the request",
                self.buckets,
                BUCKETS_PER_REQUEST_MAX,
            ),
        ] {
            if size > max {
                return Some(Reason::Bound { what, size, max });
            }
        }
        None
    }
}

/// One series' labels, reused from series to series.
#[derive(Default)]
struct Labels<'a> {
    /// The `Label` messages as on the wire.
    payloads: Vec<&'a [u8]>,
    /// Name and value as on the wire.
    raw: Vec<(&'a [u8], &'a [u8])>,
    /// UTF-8, up to the first label that is not.
    text: Vec<(&'a str, &'a str)>,
}

/// One series, checked as it is read; `false` once nothing more is to be handed over (the
/// sink stopped the request, or a bound was passed).
fn feed_series<'a>(
    index: usize,
    series: &'a [u8],
    options: &Options,
    scratch: &mut Labels<'a>,
    sink: &mut dyn Sink,
    counts: &mut Counts,
) -> Result<bool, Reason> {
    scratch.payloads.clear();
    scratch.raw.clear();
    scratch.text.clear();
    let mut has_histograms = false;
    let mut has_exemplars = false;
    let mut labels_end = 0usize;
    check_message(series, series_fields, &mut |field, wire| {
        match (field, wire) {
            (1, Wire::Bytes(label)) => {
                counts.labels += 1;
                // Past the bound the series is not visited: the list need not grow.
                if counts.labels <= LABELS_PER_REQUEST_MAX {
                    scratch.payloads.push(label);
                }
                labels_end = offset_in(series, label).map_or(0, |at| at + label.len());
            }
            (2, _) => counts.points += 1,
            (3, Wire::Bytes(exemplar)) => {
                check_exemplar(exemplar)?;
                has_exemplars = true;
            }
            (4, _) => {
                counts.points += 1;
                has_histograms = true;
            }
            _ => {}
        }
        Ok(())
    })?;
    if counts.over().is_some() {
        // Only checked from here on; the counts already fail the body.
        check_series(series, &mut Counts::default())?;
        return Ok(false);
    }
    // The series' bytes up to the end of its last label (labels and their field headers,
    // plus anything sent between them): equal bytes always decode to equal labels, and bytes
    // whose labels were accepted once always are. A series the sink knows by them is not
    // decoded (nor checked: it was).
    let raw = RawSeries {
        first: &series[..labels_end],
        second: b"",
    };
    let handed = match sink.known_series(raw) {
        Some(known) => Series {
            name: Name::new(""),
            tags: TagsRef::Unread,
            lookup: Lookup::Known(known),
            raw: Some(raw),
            index: Some(index),
        },
        None => match read_labels(series, labels_end, scratch) {
            Ok(name) => Series {
                name: Name::new(name),
                tags: TagsRef::Labels(&scratch.text),
                lookup: Lookup::Unknown,
                raw: Some(raw),
                index: Some(index),
            },
            Err(reason) => {
                let reason = reason?;
                sink.reject(&|| format!("series {index}"), reason, Scope::One);
                // Its points are not handed over, but checked and counted all the same.
                check_points(series, counts)?;
                return Ok(counts.over().is_none());
            }
        },
    };
    if !sink.series(&handed) {
        check_points(series, counts)?;
        return Ok(counts.over().is_none());
    }
    let unread = matches!(handed.tags, TagsRef::Unread);
    let go_on = feed_points(series, has_histograms, &handed, options, sink, counts)?;
    if go_on && has_exemplars {
        // A series known by its bytes was not decoded: its labels are read now, off the path
        // of series without exemplars.
        if unread && read_labels(series, labels_end, scratch).is_err() {
            return Ok(go_on);
        }
        feed_exemplars(series, &scratch.text, sink)?;
    }
    Ok(go_on)
}

/// An exemplar's structure checked (its labels' too), as prost would refuse it.
fn check_exemplar(exemplar: &[u8]) -> Result<(), Reason> {
    check_message(exemplar, exemplar_fields, &mut |field, wire| {
        if let (1, Wire::Bytes(label)) = (field, wire) {
            check_message(label, label_fields, &mut |_, _| Ok(()))?;
        }
        Ok(())
    })
}

/// Exemplar labels read per exemplar (each kept one is within 128 characters, so a longer list
/// is dropped anyway).
const EXEMPLAR_LABELS_MAX: usize = 64;

/// A series' exemplars to the sink. One whose labels are not UTF-8, too many or too long is
/// dropped: an exemplar is advice about a point, not a point.
fn feed_exemplars(
    series: &[u8],
    labels: &[(&str, &str)],
    sink: &mut dyn Sink,
) -> Result<(), Reason> {
    let mut own: Vec<(&str, &str)> = Vec::new();
    check_message(series, series_fields, &mut |field, wire| {
        let (3, Wire::Bytes(exemplar)) = (field, wire) else {
            return Ok(());
        };
        own.clear();
        let (mut value, mut ts_ms, mut fits) = (0.0f64, 0i64, true);
        check_message(exemplar, exemplar_fields, &mut |field, wire| {
            match (field, wire) {
                (1, Wire::Bytes(label)) => match read_label(label)? {
                    (name, text) if own.len() < EXEMPLAR_LABELS_MAX => {
                        match (std::str::from_utf8(name), std::str::from_utf8(text)) {
                            (Ok(name), Ok(text)) => own.push((name, text)),
                            _ => fits = false,
                        }
                    }
                    _ => fits = false,
                },
                (2, Wire::Fixed64(bits)) => value = f64::from_bits(bits),
                (3, Wire::Varint(v)) => ts_ms = v as i64,
                _ => {}
            }
            Ok(())
        })?;
        if fits && crate::sink::Exemplar::labels_fit(&own) {
            sink.exemplar(&crate::sink::Exemplar {
                series: labels,
                labels: &own,
                value,
                ts_ms,
            });
        }
        Ok(())
    })
}

/// A series' labels decoded into `scratch.text`, checked; its name. `Err(Ok(reason))`
/// rejects the series alone, `Err(Err(reason))` the body.
fn read_labels<'a>(
    series: &'a [u8],
    labels_end: usize,
    scratch: &mut Labels<'a>,
) -> Result<&'a str, Result<Reason, Reason>> {
    for &label in &scratch.payloads {
        scratch.raw.push(read_label(label).map_err(Err)?);
    }
    // One UTF-8 check over the series up to its last label (the labels and their field
    // headers, which are ASCII for labels under 128 bytes) instead of two short ones per
    // label: within valid UTF-8, a part is valid exactly when it starts and ends on char
    // boundaries.
    let text = std::str::from_utf8(&series[..labels_end]).ok();
    let mut utf8_ok = true;
    for &(name, value) in &scratch.raw {
        match (
            utf8_part(text, series, name),
            utf8_part(text, series, value),
        ) {
            (Some(name), Some(value)) => scratch.text.push((name, value)),
            _ => {
                utf8_ok = false;
                break;
            }
        }
    }
    check_labels(&scratch.text, utf8_ok).map_err(Ok)
}

/// The points of a series the sink took: floats, then native histograms.
fn feed_points(
    series: &[u8],
    has_histograms: bool,
    handed: &Series<'_>,
    options: &Options,
    sink: &mut dyn Sink,
    counts: &mut Counts,
) -> Result<bool, Reason> {
    let mut go_on = true;
    let mut i = 0usize;
    check_message(series, series_fields, &mut |field, wire| {
        if let (2, Wire::Bytes(sample)) = (field, wire) {
            let sample = read_sample(sample)?;
            if go_on {
                if let Some(point) = float_point(sample, options) {
                    go_on = hand_point(sink, handed, PointKind::Sample, i, point);
                }
            }
            i += 1;
        }
        Ok(())
    })?;
    if !has_histograms {
        return Ok(go_on);
    }
    let mut i = 0usize;
    check_message(series, series_fields, &mut |field, wire| {
        if let (4, Wire::Bytes(histogram)) = (field, wire) {
            if !go_on {
                counts.buckets += histogram_buckets(histogram)?;
                return Ok(());
            }
            let (histogram, buckets) = read_histogram(histogram)?;
            counts.buckets += buckets;
            if counts.over().is_some() {
                go_on = false;
                return Ok(());
            }
            let point = native_point(&histogram, options);
            go_on = hand_point(sink, handed, PointKind::Histogram, i, point);
            i += 1;
        }
        Ok(())
    })?;
    Ok(go_on && counts.over().is_none())
}

/// One point of a series to the sink, or its rejection; `false` when the sink stopped.
pub(crate) fn hand_point(
    sink: &mut dyn Sink,
    series: &Series<'_>,
    kind: PointKind,
    i: usize,
    point: Result<(i64, Value), Reason>,
) -> bool {
    match point {
        Ok((ts_ms, value)) => {
            let text: String;
            let value = match value {
                Value::Numeric(v) => ValueRef::Numeric(v),
                Value::Histogram(h) => ValueRef::Histogram(HistogramRef::Built(h)),
                Value::CumulativeHistogram(h) => {
                    ValueRef::CumulativeHistogram(HistogramRef::Built(h))
                }
                Value::Cumulative(c) => ValueRef::Cumulative(c),
                // The decoder makes only numerics and histograms.
                Value::Null => ValueRef::Null,
                Value::Text(owned) => {
                    text = owned;
                    ValueRef::Text(&text)
                }
            };
            let point = Point {
                ts_ms: Some(ts_ms),
                value,
                mode: Mode::Set,
            };
            sink.sample(series, point)
        }
        Err(reason) => {
            let at = PointAt {
                kind: kind.name(),
                index: i,
            };
            sink.reject_point(series, at, reason);
            true
        }
    }
}

/// A series' structure checked and its parts counted, nothing decoded.
fn check_series(series: &[u8], counts: &mut Counts) -> Result<(), Reason> {
    check_message(series, series_fields, &mut |field, wire| {
        let Wire::Bytes(payload) = wire else {
            return Ok(());
        };
        match field {
            1 => {
                counts.labels += 1;
                check_message(payload, label_fields, &mut |_, _| Ok(()))?;
            }
            2 => {
                counts.points += 1;
                check_message(payload, sample_fields, &mut |_, _| Ok(()))?;
            }
            3 => check_exemplar(payload)?,
            4 => {
                counts.points += 1;
                counts.buckets += histogram_buckets(payload)?;
            }
            _ => {}
        }
        Ok(())
    })
}

/// A series' samples and histograms checked, their buckets counted (the labels and points
/// are counted already).
fn check_points(series: &[u8], counts: &mut Counts) -> Result<(), Reason> {
    check_message(series, series_fields, &mut |field, wire| {
        match (field, wire) {
            (2, Wire::Bytes(sample)) => {
                check_message(sample, sample_fields, &mut |_, _| Ok(()))?;
            }
            (4, Wire::Bytes(histogram)) => counts.buckets += histogram_buckets(histogram)?,
            _ => {}
        }
        Ok(())
    })
}

/// How each message's fields must arrive (the rest are skipped, as prost skips them).
fn request_fields(field: u64) -> Option<Expect> {
    matches!(field, 1 | 3).then_some(Expect::Bytes)
}

/// `MetricMetadata { type = 1; metric_family_name = 2; help = 4; unit = 5; }`.
fn metadata_fields(field: u64) -> Option<Expect> {
    match field {
        1 => Some(Expect::Varint),
        2 | 4 | 5 => Some(Expect::Bytes),
        _ => None,
    }
}

/// A `MetricMetadata` entry, checked; `None` when a text is not UTF-8 or the family name is
/// empty (the entry is dropped: metadata is advisory, never a reason to refuse samples).
fn read_metadata(m: &[u8]) -> Result<Option<Metadata<'_>>, Reason> {
    let (mut kind, mut family, mut help, mut unit) = (0u64, &b""[..], &b""[..], &b""[..]);
    check_message(m, metadata_fields, &mut |field, wire| {
        match (field, wire) {
            (1, Wire::Varint(v)) => kind = v,
            (2, Wire::Bytes(b)) => family = b,
            (4, Wire::Bytes(b)) => help = b,
            (5, Wire::Bytes(b)) => unit = b,
            _ => {}
        }
        Ok(())
    })?;
    let text = |b| std::str::from_utf8(b).ok();
    Ok(match (text(family), text(help), text(unit)) {
        (Some(family), Some(help), Some(unit)) if !family.is_empty() => Some(Metadata {
            family,
            kind: metric_type(kind),
            help,
            unit,
        }),
        _ => None,
    })
}

/// Remote write's `MetricType` enum value (the same numbers in 1.0 and 2.0) as a type; an
/// unknown number reads as `unknown`.
pub(crate) fn metric_type(value: u64) -> MetricType {
    match value {
        1 => MetricType::Counter,
        2 => MetricType::Gauge,
        3 => MetricType::Histogram,
        4 => MetricType::GaugeHistogram,
        5 => MetricType::Summary,
        6 => MetricType::Info,
        7 => MetricType::StateSet,
        _ => MetricType::Unknown,
    }
}

fn series_fields(field: u64) -> Option<Expect> {
    matches!(field, 1..=4).then_some(Expect::Bytes)
}

fn exemplar_fields(field: u64) -> Option<Expect> {
    match field {
        1 => Some(Expect::Bytes),
        2 => Some(Expect::Fixed64),
        3 => Some(Expect::Varint),
        _ => None,
    }
}

fn label_fields(field: u64) -> Option<Expect> {
    matches!(field, 1 | 2).then_some(Expect::Bytes)
}

pub(crate) fn sample_fields(field: u64) -> Option<Expect> {
    match field {
        1 => Some(Expect::Fixed64),
        2 => Some(Expect::Varint),
        _ => None,
    }
}

pub(crate) fn histogram_fields(field: u64) -> Option<Expect> {
    match field {
        1 | 4 | 6 | 14 | 15 => Some(Expect::Varint),
        2 | 3 | 5 | 7 => Some(Expect::Fixed64),
        8 | 11 => Some(Expect::Bytes),
        9 | 12 => Some(Expect::Varints),
        10 | 13 | 16 => Some(Expect::Doubles),
        _ => None,
    }
}

pub(crate) fn span_fields(field: u64) -> Option<Expect> {
    matches!(field, 1 | 2).then_some(Expect::Varint)
}

/// Where `part` starts in `base`, when it lies within it.
pub(crate) fn offset_in(base: &[u8], part: &[u8]) -> Option<usize> {
    let at = (part.as_ptr() as usize).checked_sub(base.as_ptr() as usize)?;
    (at.checked_add(part.len())? <= base.len()).then_some(at)
}

/// `part` as text: a slice of `text` (the UTF-8 check of `base` up to the last label) when
/// it lies within it, else checked alone. `None` when it is not UTF-8.
fn utf8_part<'a>(text: Option<&'a str>, base: &'a [u8], part: &'a [u8]) -> Option<&'a str> {
    if part.is_empty() {
        return Some("");
    }
    if let (Some(text), Some(at)) = (text, offset_in(base, part)) {
        if at + part.len() <= text.len() {
            return text.get(at..at + part.len());
        }
    }
    std::str::from_utf8(part).ok()
}

/// A label's name and value bytes (empty when absent).
fn read_label(label: &[u8]) -> Result<(&[u8], &[u8]), Reason> {
    let (mut name, mut value): (&[u8], &[u8]) = (b"", b"");
    check_message(label, label_fields, &mut |field, wire| {
        match (field, wire) {
            (1, Wire::Bytes(b)) => name = b,
            (2, Wire::Bytes(b)) => value = b,
            _ => {}
        }
        Ok(())
    })?;
    Ok((name, value))
}

/// The checks the crate makes on a series' labels, in order: each tag (every label but
/// `__name__`) and the tag count as they come, so a series with a million labels stops early,
/// then the name (the last `__name__`). `utf8_ok` false: the label after `labels` is not UTF-8.
/// Returns the name.
pub(crate) fn check_labels<'a>(
    labels: &[(&'a str, &'a str)],
    utf8_ok: bool,
) -> Result<&'a str, Reason> {
    let mut name = None;
    let mut tags = 0usize;
    for &(key, value) in labels {
        if key == "__name__" {
            name = Some(value);
            continue;
        }
        check_tag(key, value)?;
        tags += 1;
        check_tag_count(tags)?;
    }
    if !utf8_ok {
        return Err(Reason::InvalidUtf8);
    }
    let name = name.unwrap_or_default();
    check_name(name)?;
    Ok(name)
}

pub(crate) fn read_sample(sample: &[u8]) -> Result<proto::Sample, Reason> {
    let mut out = proto::Sample::default();
    check_message(sample, sample_fields, &mut |field, wire| {
        match (field, wire) {
            (1, Wire::Fixed64(bits)) => out.value = f64::from_bits(bits),
            (2, Wire::Varint(v)) => out.timestamp = v as i64,
            _ => {}
        }
        Ok(())
    })?;
    Ok(out)
}

/// A float sample's point (always `Some`); NaN, ±Inf and the stale marker keep their bits.
pub(crate) fn float_point(s: proto::Sample, o: &Options) -> Option<Result<(i64, Value), Reason>> {
    Some(
        o.check_ts(s.timestamp)
            .map(|ts| (ts, Value::Numeric(s.value))),
    )
}

/// A native histogram's point. Counter histograms are running totals (the store keeps
/// per-period differences); `reset_hint = GAUGE` ones are snapshots.
pub(crate) fn native_point(h: &proto::Histogram, o: &Options) -> Result<(i64, Value), Reason> {
    let ts_ms = o.check_ts(h.timestamp)?;
    Ok((ts_ms, native_value(h)?))
}

/// A histogram read from the wire as prost reads it (scalars and oneofs last one wins,
/// repeated fields appended, packed or not), checked as prost would refuse it, with its
/// bucket count as [`histogram_buckets`] counts it.
pub(crate) fn read_histogram(h: &[u8]) -> Result<(proto::Histogram, usize), Reason> {
    let mut out = proto::Histogram::default();
    let mut buckets = 0usize;
    check_message(h, histogram_fields, &mut |field, wire| {
        buckets += match (field, wire) {
            (8 | 11, Wire::Bytes(_)) | (9 | 12, Wire::Varint(_)) => 1,
            (9 | 12, Wire::Bytes(packed)) => varint_elements(Field::Bytes(packed)),
            _ => 0,
        };
        match (field, wire) {
            (1, Wire::Varint(v)) => out.count = Some(proto::Count::CountInt(v)),
            (2, Wire::Fixed64(b)) => out.count = Some(proto::Count::CountFloat(f64::from_bits(b))),
            (3, Wire::Fixed64(b)) => out.sum = f64::from_bits(b),
            (4, Wire::Varint(v)) => out.schema = zigzag32(v),
            (5, Wire::Fixed64(b)) => out.zero_threshold = f64::from_bits(b),
            (6, Wire::Varint(v)) => out.zero_count = Some(proto::ZeroCount::ZeroCountInt(v)),
            (7, Wire::Fixed64(b)) => {
                out.zero_count = Some(proto::ZeroCount::ZeroCountFloat(f64::from_bits(b)))
            }
            (8, Wire::Bytes(span)) => out.negative_spans.push(read_span(span)?),
            (9, wire) => sint64s(wire, &mut out.negative_deltas)?,
            (10, wire) => doubles(wire, &mut out.negative_counts),
            (11, Wire::Bytes(span)) => out.positive_spans.push(read_span(span)?),
            (12, wire) => sint64s(wire, &mut out.positive_deltas)?,
            (13, wire) => doubles(wire, &mut out.positive_counts),
            (14, Wire::Varint(v)) => out.reset_hint = v as i32,
            (15, Wire::Varint(v)) => out.timestamp = v as i64,
            (16, wire) => doubles(wire, &mut out.custom_values),
            _ => {}
        }
        Ok(())
    })?;
    Ok((out, buckets))
}

fn read_span(span: &[u8]) -> Result<proto::BucketSpan, Reason> {
    let mut out = proto::BucketSpan::default();
    check_message(span, span_fields, &mut |field, wire| {
        match (field, wire) {
            (1, Wire::Varint(v)) => out.offset = zigzag32(v),
            (2, Wire::Varint(v)) => out.length = v as u32,
            _ => {}
        }
        Ok(())
    })?;
    Ok(out)
}

/// `sint32` as prost decodes it: the varint truncated to 32 bits, then zigzag.
pub(crate) fn zigzag32(v: u64) -> i32 {
    let v = v as u32;
    ((v >> 1) as i32) ^ -((v & 1) as i32)
}

pub(crate) fn zigzag64(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A repeated `sint64`, packed or not.
fn sint64s(wire: Wire<'_>, out: &mut Vec<i64>) -> Result<(), Reason> {
    match wire {
        Wire::Varint(v) => out.push(zigzag64(v)),
        Wire::Bytes(packed) => packed_varints(packed, &mut |v| out.push(zigzag64(v)))
            .ok_or_else(|| malformed("truncated packed varint".to_owned()))?,
        Wire::Fixed64(_) | Wire::Fixed32 => {}
    }
    Ok(())
}

/// A repeated `double`, packed or not (a packed length checked by [`check_counts`]).
fn doubles(wire: Wire<'_>, out: &mut Vec<f64>) {
    match wire {
        Wire::Fixed64(bits) => out.push(f64::from_bits(bits)),
        Wire::Bytes(packed) => out.extend(
            packed
                .chunks_exact(8)
                .filter_map(|c| c.try_into().ok())
                .map(|c: [u8; 8]| f64::from_le_bytes(c)),
        ),
        Wire::Varint(_) | Wire::Fixed32 => {}
    }
}

/// Decompresses and decodes the body with prost; any failure rejects the whole body. The
/// server and [`parse`] decode with [`visit`]; this is the reference the tests compare with.
pub fn decode(body: &[u8]) -> Result<proto::WriteRequest, Reason> {
    let raw = decompress(body)?;
    check_counts(&raw)?;
    proto::WriteRequest::decode(raw.as_slice()).map_err(|e| malformed(e.to_string()))
}

/// What a decode error names.
const WHAT: &str = "protobuf WriteRequest";

pub(crate) fn malformed(detail: String) -> Reason {
    Reason::Decode { what: WHAT, detail }
}

/// How a known field must arrive on the wire (what prost accepts for its type).
#[derive(Clone, Copy)]
pub(crate) enum Expect {
    Varint,
    Fixed64,
    Bytes,
    /// A repeated varint: unpacked or packed.
    Varints,
    /// A repeated double: unpacked or packed (a multiple of 8 bytes).
    Doubles,
}

pub(crate) fn check_wire(field: u64, wire: Wire<'_>, expect: Expect) -> Result<(), Reason> {
    let ok = match (expect, wire) {
        (Expect::Varint | Expect::Varints, Wire::Varint(_)) => true,
        (Expect::Fixed64 | Expect::Doubles, Wire::Fixed64(_)) => true,
        (Expect::Bytes, Wire::Bytes(_)) => true,
        (Expect::Varints, Wire::Bytes(packed)) => packed.last().is_none_or(|&b| b < 0x80),
        (Expect::Doubles, Wire::Bytes(packed)) => packed.len() % 8 == 0,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(malformed(format!(
            "field {field} has an invalid wire type or length"
        )))
    }
}

/// Walks a message checking every field this decoder reads (`expect` by field number; others
/// are skipped, as prost skips unknown fields). Field number 0 is invalid, as in prost.
pub(crate) fn check_message<'a, F>(
    buf: &'a [u8],
    expect: fn(u64) -> Option<Expect>,
    f: &mut F,
) -> Result<(), Reason>
where
    F: FnMut(u64, Wire<'a>) -> Result<(), Reason>,
{
    walk_wire(buf, WHAT, &mut |field, wire| {
        if field == 0 || field > u64::from(u32::MAX >> 3) {
            return Err(malformed(format!("invalid field number {field}")));
        }
        if let Some(expect) = expect(field) {
            check_wire(field, wire, expect)?;
        }
        f(field, wire)
    })
}

/// Checks the whole request's structure (every message and field the decoders read, as prost
/// would refuse it) and counts series, labels, samples + histograms and buckets against their
/// bounds, before anything is decoded or allocated (what [`decode`] does before prost; [`visit`]
/// makes the same checks as it goes).
fn check_counts(raw: &[u8]) -> Result<(), Reason> {
    let mut counts = Counts::default();
    check_message(raw, request_fields, &mut |field, wire| {
        match (field, wire) {
            (1, Wire::Bytes(series)) => {
                counts.series += 1;
                check_series(series, &mut counts)?;
            }
            (3, Wire::Bytes(metadata)) => {
                read_metadata(metadata)?;
            }
            _ => {}
        }
        Ok(())
    })?;
    counts.over().map_or(Ok(()), Err)
}

/// Checks one native histogram's fields and counts its spans (fields 8, 11) and integer
/// bucket deltas (fields 9, 12, packed or not) as they will be decoded. Float counts are 8
/// bytes on the wire and decoded alike.
pub(crate) fn histogram_buckets(histogram: &[u8]) -> Result<usize, Reason> {
    let mut buckets = 0usize;
    check_message(histogram, histogram_fields, &mut |number, wire| {
        buckets += match (number, wire) {
            (8 | 11, Wire::Bytes(payload)) => {
                check_message(payload, span_fields, &mut |_, _| Ok(()))?;
                1
            }
            (9 | 12, Wire::Varint(_)) => 1,
            (9 | 12, Wire::Bytes(packed)) => varint_elements(Field::Bytes(packed)),
            _ => 0,
        };
        Ok(())
    })?;
    Ok(buckets)
}

/// Snappy block decompression, bounded by the declared length before allocating.
pub fn decompress(body: &[u8]) -> Result<Vec<u8>, Reason> {
    let mut out = Vec::new();
    decompress_into(body, &mut out)?;
    Ok(out)
}

/// [`decompress`] into `out` (replacing what it held), so a caller can reuse one buffer.
pub fn decompress_into(body: &[u8], out: &mut Vec<u8>) -> Result<(), Reason> {
    let declared = snap::raw::decompress_len(body).map_err(snappy_error)?;
    if declared > DECOMPRESSED_BYTES_MAX {
        return Err(Reason::Bound {
            what: "decompressed body size in bytes",
            size: declared,
            max: DECOMPRESSED_BYTES_MAX,
        });
    }
    out.clear();
    out.resize(declared, 0);
    let size = snap::raw::Decoder::new()
        .decompress(body, out)
        .map_err(snappy_error)?;
    out.truncate(size);
    Ok(())
}

fn snappy_error(e: snap::Error) -> Reason {
    Reason::Decode {
        what: "snappy block",
        detail: e.to_string(),
    }
}

/// The decoder this crate had before [`parse_into`]: prost decodes the whole request into owned
/// structs, then each sample is built from them. Kept as the reference the proptests compare
/// [`parse`] with; not for production use (several allocations per label and sample).
#[doc(hidden)]
pub fn parse_with_prost(body: &[u8], options: &Options) -> Batch {
    prost_batch_of(decode(body), options)
}

/// The series' metric name and tags, checked against the crate's bounds.
struct ProstSeriesId {
    name: String,
    tags: crate::Tags,
}

fn prost_batch_of(decoded: Result<proto::WriteRequest, Reason>, options: &Options) -> Batch {
    let mut batch = Batch::default();
    match decoded {
        Ok(request) => {
            for (index, series) in request.timeseries.iter().enumerate() {
                if !add_series(&mut batch, index, series, options) {
                    break;
                }
            }
        }
        Err(reason) => batch.reject_rest(|| "body".to_owned(), reason),
    }
    batch
}

/// Adds one series' samples and histograms; `false` once the batch is full.
fn add_series(batch: &mut Batch, index: usize, series: &proto::TimeSeries, o: &Options) -> bool {
    let id = match series_id(&series.labels) {
        Ok(id) => id,
        Err(reason) => {
            batch.reject_one(|| format!("series {index}"), reason);
            return true;
        }
    };
    let at = |what: &str, i: usize| format!("series {index} (`{}`), {what} {i}", id.name);
    for (i, sample) in series.samples.iter().enumerate() {
        match float_sample(&id, sample, o) {
            Ok(Some(s)) => {
                if !batch.push(s, || at("sample", i)) {
                    return false;
                }
            }
            Ok(None) => {}
            Err(reason) => batch.reject_one(|| at("sample", i), reason),
        }
    }
    for (i, histogram) in series.histograms.iter().enumerate() {
        match native_sample(&id, histogram, o) {
            Ok(s) => {
                if !batch.push(s, || at("histogram", i)) {
                    return false;
                }
            }
            Err(reason) => batch.reject_one(|| at("histogram", i), reason),
        }
    }
    prost_exemplars(batch, series);
    true
}

/// A series' exemplars as the visitor hands them over.
fn prost_exemplars(batch: &mut Batch, series: &proto::TimeSeries) {
    let text = |labels: &[proto::Label]| -> Option<Vec<(String, String)>> {
        labels
            .iter()
            .map(|l| {
                let name = std::str::from_utf8(&l.name).ok()?;
                let value = std::str::from_utf8(&l.value).ok()?;
                Some((name.to_owned(), value.to_owned()))
            })
            .collect()
    };
    let Some(labels) = text(&series.labels) else {
        return;
    };
    for e in &series.exemplars {
        let Some(own) = text(&e.labels) else {
            continue;
        };
        let borrowed: Vec<(&str, &str)> =
            own.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let fits = own.len() <= EXEMPLAR_LABELS_MAX && crate::sink::Exemplar::labels_fit(&borrowed);
        if fits && batch.exemplars.len() < crate::batch::EXEMPLARS_PER_BATCH_MAX {
            batch.exemplars.push(crate::ExemplarOwned {
                series: labels.clone(),
                labels: own,
                value: e.value,
                ts_ms: e.timestamp,
            });
        }
    }
}

/// Name from `__name__`, every other label a tag in the order sent.
fn series_id(labels: &[proto::Label]) -> Result<ProstSeriesId, Reason> {
    let mut name = None;
    let mut tags = TagList::with_capacity(labels.len().saturating_sub(1));
    for label in labels {
        let key = std::str::from_utf8(&label.name).map_err(|_| Reason::InvalidUtf8)?;
        let value = std::str::from_utf8(&label.value).map_err(|_| Reason::InvalidUtf8)?;
        if key == "__name__" {
            name = Some(value);
            continue;
        }
        check_tag(key, value)?;
        tags.push((key.to_owned(), value.to_owned()));
        // Checked as they come so a series with a million labels stops early.
        check_tag_count(tags.len())?;
    }
    let name = name.unwrap_or_default();
    check_name(name)?;
    Ok(ProstSeriesId {
        name: name.to_owned(),
        tags: tags.into(),
    })
}

/// A float sample (always `Some`); NaN, ±Inf and the stale marker keep their bits.
fn float_sample(
    id: &ProstSeriesId,
    s: &proto::Sample,
    o: &Options,
) -> Result<Option<Sample>, Reason> {
    let ts_ms = o.check_ts(s.timestamp)?;
    Ok(Some(prost_sample(id, ts_ms, Value::Numeric(s.value))))
}

/// A native histogram. Counter histograms are running totals (the store keeps per-period
/// differences); `reset_hint = GAUGE` ones are snapshots.
fn native_sample(id: &ProstSeriesId, h: &proto::Histogram, o: &Options) -> Result<Sample, Reason> {
    let ts_ms = o.check_ts(h.timestamp)?;
    Ok(prost_sample(id, ts_ms, native_value(h)?))
}

fn prost_sample(id: &ProstSeriesId, ts_ms: i64, value: Value) -> Sample {
    Sample {
        name: id.name.clone(),
        tags: id.tags.clone(),
        ts_ms: Some(ts_ms),
        value,
        mode: Mode::Set,
    }
}

/// The wire histogram as `hist::convert`'s input. Float counts are used when the count, the
/// zero count or any bucket is sent as a float (upstream, a histogram is all-integer or
/// all-float; a mix is read as float so no count is dropped).
/// A gauge histogram is a snapshot, converted now; a counter histogram stays in its own buckets
/// until the store has differenced it.
fn native_value(h: &proto::Histogram) -> Result<Value, Reason> {
    let native = native(h);
    if h.reset_hint == RESET_HINT_GAUGE {
        let converted = convert::from_native(&native).map_err(Reason::Histogram)?;
        Ok(Value::Histogram(converted.histogram))
    } else {
        let cumulative = Cumulative::from_native(&native).map_err(Reason::Histogram)?;
        Ok(Value::Cumulative(cumulative))
    }
}

fn native(h: &proto::Histogram) -> NativeHistogram {
    let float = matches!(h.count, Some(proto::Count::CountFloat(_)))
        || matches!(h.zero_count, Some(proto::ZeroCount::ZeroCountFloat(_)))
        || !h.positive_counts.is_empty()
        || !h.negative_counts.is_empty();
    let counts = if float {
        NativeCounts::Float {
            count: match h.count {
                Some(proto::Count::CountFloat(c)) => c,
                Some(proto::Count::CountInt(c)) => c as f64,
                None => 0.0,
            },
            zero_count: match h.zero_count {
                Some(proto::ZeroCount::ZeroCountFloat(c)) => c,
                Some(proto::ZeroCount::ZeroCountInt(c)) => c as f64,
                None => 0.0,
            },
            positive_counts: h.positive_counts.clone(),
            negative_counts: h.negative_counts.clone(),
        }
    } else {
        NativeCounts::Integer {
            count: match h.count {
                Some(proto::Count::CountInt(c)) => c,
                _ => 0,
            },
            zero_count: match h.zero_count {
                Some(proto::ZeroCount::ZeroCountInt(c)) => c,
                _ => 0,
            },
            positive_deltas: h.positive_deltas.clone(),
            negative_deltas: h.negative_deltas.clone(),
        }
    };
    NativeHistogram {
        schema: h.schema,
        zero_threshold: h.zero_threshold,
        positive_spans: spans(&h.positive_spans),
        negative_spans: spans(&h.negative_spans),
        counts,
        sum: h.sum,
        custom_values: h.custom_values.clone(),
    }
}

fn spans(spans: &[proto::BucketSpan]) -> Vec<Span> {
    spans
        .iter()
        .map(|s| Span {
            offset: s.offset,
            length: s.length,
        })
        .collect()
}
