//! Prometheus remote write 2.0 (`POST /api/v1/write` with Content-Type
//! `application/x-protobuf;proto=io.prometheus.write.v2.Request`): a snappy block-compressed
//! protobuf `io.prometheus.write.v2.Request`. Every string is an index into the request's symbols
//! table; each series carries its samples or native histograms, exemplars, metadata and a created
//! timestamp. Samples and histograms become what remote write 1.0's become (the same checks, the
//! same histogram conversion: `crate::remote_write`); metadata goes to [`Sink::metadata`].
//! Exemplars go to [`Sink::exemplar`] after their series' points; created timestamps are
//! checked and not stored (the store finds resets in the values). Mapping and choices: `FORMAT.md`.
//!
//! A body that cannot be decompressed or decoded is rejected whole (nothing of it is stored);
//! a bad series (a label reference past the symbols table, an odd number of references, a bad
//! label) or point is rejected alone, named.

use crate::batch::MetricType;
use crate::batch::{Batch, Options, Reason};
use crate::remote_write::{
    check_labels, check_message, float_point, hand_point, histogram_buckets, malformed,
    metric_type, native_point, read_histogram, read_sample, reject_body, sample_fields, Counts,
    Expect, PointKind, DECOMPRESSED_BYTES_MAX, LABELS_PER_REQUEST_MAX,
};
use crate::sink::{Lookup, Metadata, Name, Scope, Series, Sink, TagsRef};
use crate::wire::{packed_varints, Wire};

/// The `proto=` parameter of the Content-Type naming this message.
pub const PROTO: &str = "io.prometheus.write.v2.Request";

/// Entries in one request's symbols table (each lent from the body: 16 bytes apiece, so 32 MiB
/// at most however the 64 MiB body is made).
pub const SYMBOLS_PER_REQUEST_MAX: usize = 2_000_000;

/// Exemplars in one request.
pub const EXEMPLARS_PER_REQUEST_MAX: usize = 1_000_000;

/// What a request put in the sink, as the 2.0 response headers report it
/// (`X-Prometheus-Remote-Write-{Samples,Histograms,Exemplars}-Written`): points the sink took,
/// and exemplars handed to it (the server counts the ones its exemplar store kept).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub samples: usize,
    pub histograms: usize,
    pub exemplars: usize,
}

/// Upstream `io/prometheus/write/v2/types.proto` as prost derive structs, for tests and tools
/// that build requests (the decoder reads the wire itself). Samples and histograms have the
/// same field numbers as in 1.0 and reuse its structs.
pub mod proto {
    pub use crate::remote_write::proto::{BucketSpan, Count, Histogram, Sample, ZeroCount};

    /// `Request { repeated string symbols = 4; repeated TimeSeries timeseries = 5; }` (1–3 are
    /// reserved: they are 1.0's fields).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Request {
        #[prost(string, repeated, tag = "4")]
        pub symbols: Vec<String>,
        #[prost(message, repeated, tag = "5")]
        pub timeseries: Vec<TimeSeries>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        /// Name, value, name, value… as indices into `Request.symbols`.
        #[prost(uint32, repeated, tag = "1")]
        pub labels_refs: Vec<u32>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub histograms: Vec<Histogram>,
        #[prost(message, repeated, tag = "4")]
        pub exemplars: Vec<Exemplar>,
        #[prost(message, optional, tag = "5")]
        pub metadata: Option<Metadata>,
        /// Milliseconds; 0 = not set.
        #[prost(int64, tag = "6")]
        pub created_timestamp: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Exemplar {
        #[prost(uint32, repeated, tag = "1")]
        pub labels_refs: Vec<u32>,
        #[prost(double, tag = "2")]
        pub value: f64,
        #[prost(int64, tag = "3")]
        pub timestamp: i64,
    }

    /// `Metadata { MetricType type = 1; uint32 help_ref = 3; uint32 unit_ref = 4; }`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Metadata {
        /// `METRIC_TYPE_UNSPECIFIED = 0`, `COUNTER = 1`, `GAUGE = 2`, `HISTOGRAM = 3`,
        /// `GAUGEHISTOGRAM = 4`, `SUMMARY = 5`, `INFO = 6`, `STATESET = 7`.
        #[prost(int32, tag = "1")]
        pub r#type: i32,
        #[prost(uint32, tag = "3")]
        pub help_ref: u32,
        #[prost(uint32, tag = "4")]
        pub unit_ref: u32,
    }
}

/// Parses one remote write 2.0 body (snappy block format, as the HTTP body arrives).
pub fn parse(body: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_into(body, options, &mut batch);
    batch
}

/// [`parse`] into any sink; what it took.
pub fn parse_into<S: Sink>(body: &[u8], options: &Options, sink: &mut S) -> Written {
    match crate::remote_write::decompress(body) {
        Ok(raw) => parse_decompressed_into(&raw, options, sink),
        Err(reason) => {
            reject_body(sink, reason);
            Written::default()
        }
    }
}

/// Parses an already decompressed `Request` (the fuzz targets reach the decoder through it).
pub fn parse_decompressed(raw: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_decompressed_into(raw, options, &mut batch);
    batch
}

/// [`parse_decompressed`] into any sink: each series' labels resolved through the symbols
/// table and announced ([`Sink::series`]), its metadata ([`Sink::metadata`]), then its points.
/// A body found malformed after some series were handed over is rejected whole
/// ([`Scope::Whole`]) and nothing counts as written.
pub fn parse_decompressed_into<S: Sink>(raw: &[u8], options: &Options, sink: &mut S) -> Written {
    match feed(raw, options, sink) {
        Ok(written) => written,
        Err(reason) => {
            reject_body(sink, reason);
            Written::default()
        }
    }
}

/// What one request holds beyond 1.0's counts.
#[derive(Default)]
struct Counts2 {
    base: Counts,
    exemplars: usize,
}

impl Counts2 {
    fn over(&self) -> Option<Reason> {
        if let Some(reason) = self.base.over() {
            return Some(reason);
        }
        (self.exemplars > EXEMPLARS_PER_REQUEST_MAX).then_some(Reason::Bound {
            what: "exemplars in the request",
            size: self.exemplars,
            max: EXEMPLARS_PER_REQUEST_MAX,
        })
    }
}

/// One series' label references and labels, reused from series to series.
#[derive(Default)]
struct Scratch<'a> {
    refs: Vec<u32>,
    text: Vec<(&'a str, &'a str)>,
}

fn feed(raw: &[u8], options: &Options, sink: &mut dyn Sink) -> Result<Written, Reason> {
    if raw.len() > DECOMPRESSED_BYTES_MAX {
        return Err(Reason::Bound {
            what: "decompressed body size in bytes",
            size: raw.len(),
            max: DECOMPRESSED_BYTES_MAX,
        });
    }
    // The symbols first: protobuf lets them come after the series that refer to them.
    let mut symbols: Vec<&str> = Vec::new();
    check_message(
        raw,
        request_fields,
        &mut |field, wire| match (field, wire) {
            (1..=3, _) => Err(malformed(format!(
            "field {field} is a remote write 1.0 field: the body is a prometheus.WriteRequest, \
             not the {PROTO} its Content-Type names"
        ))),
            (4, Wire::Bytes(symbol)) => {
                if symbols.len() >= SYMBOLS_PER_REQUEST_MAX {
                    return Err(Reason::Bound {
                        what: "symbols in the request",
                        size: symbols.len() + 1,
                        max: SYMBOLS_PER_REQUEST_MAX,
                    });
                }
                let text = std::str::from_utf8(symbol)
                    .map_err(|_| malformed(format!("symbol {} is not UTF-8", symbols.len())))?;
                symbols.push(text);
                Ok(())
            }
            _ => Ok(()),
        },
    )?;
    let mut counts = Counts2::default();
    let mut written = Written::default();
    let mut scratch = Scratch::default();
    let mut index = 0usize;
    let mut visiting = true;
    check_message(raw, request_fields, &mut |field, wire| {
        if let (5, Wire::Bytes(series)) = (field, wire) {
            counts.base.series += 1;
            visiting &= counts.over().is_none();
            let mut reader = SeriesReader {
                index,
                symbols: &symbols,
                options,
                counts: &mut counts,
                written: &mut written,
            };
            if visiting {
                visiting = reader.feed(series, &mut scratch, sink)?;
            } else {
                check_series(series, &symbols, &mut counts)?;
            }
            index += 1;
        }
        Ok(())
    })?;
    counts.over().map_or(Ok(written), Err)
}

/// One series' reading context.
struct SeriesReader<'r, 'a> {
    index: usize,
    symbols: &'r [&'a str],
    options: &'r Options,
    counts: &'r mut Counts2,
    written: &'r mut Written,
}

impl<'a> SeriesReader<'_, 'a> {
    /// One series, checked as it is read; `false` once nothing more is to be handed over (the
    /// sink stopped the request, or a bound was passed).
    fn feed(
        &mut self,
        series: &'a [u8],
        scratch: &mut Scratch<'a>,
        sink: &mut dyn Sink,
    ) -> Result<bool, Reason> {
        scratch.refs.clear();
        scratch.text.clear();
        let mut metadata: Option<&[u8]> = None;
        let counts = &mut *self.counts;
        check_message(series, series_fields, &mut |field, wire| {
            match (field, wire) {
                (1, wire) => {
                    varints(wire, &mut |v| {
                        counts.base.labels += 1;
                        // Past the bound the series is not visited: the list need not grow.
                        if counts.base.labels <= LABELS_PER_REQUEST_MAX {
                            scratch.refs.push(v as u32);
                        }
                    })?;
                }
                (2 | 3, _) => counts.base.points += 1,
                (4, Wire::Bytes(exemplar)) => {
                    counts.exemplars += 1;
                    check_exemplar(exemplar, self.symbols)?;
                }
                (5, Wire::Bytes(m)) => metadata = Some(m),
                _ => {}
            }
            Ok(())
        })?;
        if counts.over().is_some() {
            check_points(series, counts)?;
            return Ok(false);
        }
        let index = self.index;
        let resolved = resolve(&scratch.refs, self.symbols, &mut scratch.text)
            .and_then(|()| check_labels(&scratch.text, true))
            .and_then(|name| {
                let meta = metadata
                    .map(|m| read_metadata(m, self.symbols))
                    .transpose()?;
                Ok((name, meta))
            });
        let (name, meta) = match resolved {
            Ok(found) => found,
            Err(reason) => {
                sink.reject(&|| format!("series {index}"), reason, Scope::One);
                check_points(series, counts)?;
                return Ok(counts.over().is_none());
            }
        };
        let handed = Series {
            name: Name::new(name),
            tags: TagsRef::Labels(&scratch.text),
            lookup: Lookup::NotAsked,
            raw: None,
            index: Some(index),
        };
        if !sink.series(&handed) {
            check_points(series, counts)?;
            return Ok(counts.over().is_none());
        }
        if let Some((kind, help, unit)) = meta {
            let family = family_name(name, kind);
            sink.metadata(&Metadata {
                family,
                kind,
                help,
                unit,
            });
        }
        let go_on = self.feed_points(series, &handed, sink)?;
        if go_on {
            self.feed_exemplars(series, &scratch.text, sink)?;
        }
        Ok(go_on)
    }

    /// A series' exemplars (references checked already) to the sink; one whose labels are
    /// longer than Prometheus's bound is dropped.
    fn feed_exemplars(
        &mut self,
        series: &[u8],
        labels: &[(&str, &str)],
        sink: &mut dyn Sink,
    ) -> Result<(), Reason> {
        let symbols = self.symbols;
        let written = &mut *self.written;
        let mut refs: Vec<u32> = Vec::new();
        let mut own: Vec<(&str, &str)> = Vec::new();
        check_message(series, series_fields, &mut |field, wire| {
            let (4, Wire::Bytes(exemplar)) = (field, wire) else {
                return Ok(());
            };
            refs.clear();
            own.clear();
            let (mut value, mut ts_ms) = (0.0f64, 0i64);
            check_message(exemplar, exemplar_fields, &mut |field, wire| {
                match (field, wire) {
                    (1, wire) => varints(wire, &mut |v| {
                        // Past 128 characters it is dropped: a longer list need not grow.
                        if refs.len() < 2 * crate::EXEMPLAR_LABEL_CHARS_MAX {
                            refs.push(v as u32);
                        }
                    })?,
                    (2, Wire::Fixed64(bits)) => value = f64::from_bits(bits),
                    (3, Wire::Varint(v)) => ts_ms = v as i64,
                    _ => {}
                }
                Ok(())
            })?;
            if resolve(&refs, symbols, &mut own).is_ok() && crate::Exemplar::labels_fit(&own) {
                written.exemplars += 1;
                sink.exemplar(&crate::Exemplar {
                    series: labels,
                    labels: &own,
                    value,
                    ts_ms,
                });
            }
            Ok(())
        })
    }

    /// The points of a series the sink took: floats, then native histograms.
    fn feed_points(
        &mut self,
        series: &[u8],
        handed: &Series<'_>,
        sink: &mut dyn Sink,
    ) -> Result<bool, Reason> {
        let mut go_on = true;
        let (mut samples, mut histograms) = (0usize, 0usize);
        let options = self.options;
        let counts = &mut *self.counts;
        let written = &mut *self.written;
        check_message(series, series_fields, &mut |field, wire| {
            match (field, wire) {
                (2, Wire::Bytes(sample)) => {
                    let sample = read_sample(sample)?;
                    if go_on {
                        if let Some(point) = float_point(sample, options) {
                            written.samples += usize::from(point.is_ok());
                            go_on = hand_point(sink, handed, PointKind::Sample, samples, point);
                        }
                    }
                    samples += 1;
                }
                (3, Wire::Bytes(histogram)) => {
                    if !go_on {
                        counts.base.buckets += histogram_buckets(histogram)?;
                        return Ok(());
                    }
                    let (histogram, buckets) = read_histogram(histogram)?;
                    counts.base.buckets += buckets;
                    if counts.over().is_some() {
                        go_on = false;
                        return Ok(());
                    }
                    let point = native_point(&histogram, options);
                    written.histograms += usize::from(point.is_ok());
                    go_on = hand_point(sink, handed, PointKind::Histogram, histograms, point);
                    histograms += 1;
                }
                _ => {}
            }
            Ok(())
        })?;
        Ok(go_on && counts.over().is_none())
    }
}

/// A series' labels from its references: pairs of symbols, checked in range.
fn resolve<'a>(
    refs: &[u32],
    symbols: &[&'a str],
    out: &mut Vec<(&'a str, &'a str)>,
) -> Result<(), Reason> {
    if !refs.len().is_multiple_of(2) {
        return Err(Reason::bad_value(
            "label references in name-value pairs",
            &format!("{} references", refs.len()),
        ));
    }
    for pair in refs.chunks_exact(2) {
        out.push((symbol(symbols, pair[0])?, symbol(symbols, pair[1])?));
    }
    Ok(())
}

fn symbol<'a>(symbols: &[&'a str], reference: u32) -> Result<&'a str, Reason> {
    symbols.get(reference as usize).copied().ok_or_else(|| {
        Reason::bad_value(
            "a reference within the symbols table",
            &format!("{reference} (the table has {} symbols)", symbols.len()),
        )
    })
}

/// A series' metadata: type, help and unit (references checked).
fn read_metadata<'a>(
    m: &[u8],
    symbols: &[&'a str],
) -> Result<(MetricType, &'a str, &'a str), Reason> {
    let (mut kind, mut help, mut unit) = (0u64, 0u32, 0u32);
    check_message(m, metadata_fields, &mut |field, wire| {
        match (field, wire) {
            (1, Wire::Varint(v)) => kind = v,
            (3, Wire::Varint(v)) => help = v as u32,
            (4, Wire::Varint(v)) => unit = v as u32,
            _ => {}
        }
        Ok(())
    })?;
    // A reference 0 is the empty string the table starts with; an empty table has none.
    let text = |r: u32| match r {
        0 if symbols.is_empty() => Ok(""),
        r => symbol(symbols, r),
    };
    Ok((metric_type(kind), text(help)?, text(unit)?))
}

/// The family a series belongs to: its name, but for a classic histogram or summary (typed so)
/// the name its `_bucket`, `_sum` and `_count` series share.
pub fn family_name(name: &str, kind: MetricType) -> &str {
    let suffixes: &[&str] = match kind {
        MetricType::Histogram | MetricType::GaugeHistogram => &["_bucket", "_sum", "_count"],
        MetricType::Summary => &["_sum", "_count"],
        _ => &[],
    };
    for suffix in suffixes {
        if let Some(family) = name.strip_suffix(suffix) {
            if !family.is_empty() {
                return family;
            }
        }
    }
    name
}

/// An exemplar's fields checked, its label references in range.
fn check_exemplar(exemplar: &[u8], symbols: &[&str]) -> Result<(), Reason> {
    let mut refs = 0usize;
    let mut bad = None;
    check_message(exemplar, exemplar_fields, &mut |field, wire| {
        if field == 1 {
            varints(wire, &mut |v| {
                refs += 1;
                if v >= symbols.len() as u64 && bad.is_none() {
                    bad = Some(v);
                }
            })?;
        }
        Ok(())
    })?;
    // An exemplar is not stored: a bad one is a malformed body, as its sender's encoder
    // would never make it.
    if let Some(v) = bad {
        return Err(malformed(format!(
            "exemplar label reference {v} is past the {} symbols",
            symbols.len()
        )));
    }
    if !refs.is_multiple_of(2) {
        return Err(malformed(format!(
            "exemplar has {refs} label references, not name-value pairs"
        )));
    }
    Ok(())
}

/// A series' structure checked and its parts counted, nothing handed over.
fn check_series(series: &[u8], symbols: &[&str], counts: &mut Counts2) -> Result<(), Reason> {
    check_message(series, series_fields, &mut |field, wire| {
        match (field, wire) {
            (1, wire) => varints(wire, &mut |_| counts.base.labels += 1)?,
            (4, Wire::Bytes(exemplar)) => {
                counts.exemplars += 1;
                check_exemplar(exemplar, symbols)?;
            }
            (5, Wire::Bytes(m)) => check_message(m, metadata_fields, &mut |_, _| Ok(()))?,
            _ => {}
        }
        Ok(())
    })?;
    counts.base.points += count_points(series)?;
    check_points(series, counts)
}

fn count_points(series: &[u8]) -> Result<usize, Reason> {
    let mut points = 0usize;
    check_message(series, series_fields, &mut |field, _| {
        points += usize::from(matches!(field, 2 | 3));
        Ok(())
    })?;
    Ok(points)
}

/// A series' samples and histograms checked, their buckets counted (the points themselves
/// are counted already).
fn check_points(series: &[u8], counts: &mut Counts2) -> Result<(), Reason> {
    check_message(series, series_fields, &mut |field, wire| {
        match (field, wire) {
            (2, Wire::Bytes(sample)) => {
                check_message(sample, sample_fields, &mut |_, _| Ok(()))?;
            }
            (3, Wire::Bytes(histogram)) => counts.base.buckets += histogram_buckets(histogram)?,
            _ => {}
        }
        Ok(())
    })
}

/// A repeated varint, packed or not.
fn varints(wire: Wire<'_>, f: &mut dyn FnMut(u64)) -> Result<(), Reason> {
    match wire {
        Wire::Varint(v) => f(v),
        Wire::Bytes(packed) => packed_varints(packed, &mut |v| f(v))
            .ok_or_else(|| malformed("truncated packed varint".to_owned()))?,
        Wire::Fixed64(_) | Wire::Fixed32 => {}
    }
    Ok(())
}

/// How each message's fields must arrive (the rest are skipped, as prost skips them).
fn request_fields(field: u64) -> Option<Expect> {
    matches!(field, 4 | 5).then_some(Expect::Bytes)
}

fn series_fields(field: u64) -> Option<Expect> {
    match field {
        1 => Some(Expect::Varints),
        2..=5 => Some(Expect::Bytes),
        6 => Some(Expect::Varint),
        _ => None,
    }
}

fn exemplar_fields(field: u64) -> Option<Expect> {
    match field {
        1 => Some(Expect::Varints),
        2 => Some(Expect::Fixed64),
        3 => Some(Expect::Varint),
        _ => None,
    }
}

fn metadata_fields(field: u64) -> Option<Expect> {
    matches!(field, 1 | 3 | 4).then_some(Expect::Varint)
}
