//! Prometheus remote write 1.0 (`POST /api/v1/write`): a snappy **block**-compressed protobuf
//! `prometheus.WriteRequest`. Float samples become numerics; native histograms (integer or float
//! counts, exponential schemas and custom bounds) become llhist histograms through
//! `hist::convert::from_native`; classic `_bucket{le}` series are ordinary float series and stay
//! numerics. Mapping and choices: `FORMAT.md`.
//!
//! A body that cannot be decompressed or decoded is rejected whole (`rest_of_body`: the server
//! answers 400, which senders do not retry); a bad series or sample is rejected alone, named.

use hist::convert::{self, NativeCounts, NativeHistogram, Span};
use prost::Message;

use crate::batch::{check_name, check_tag, check_tag_count, Batch, Mode, Options, Reason, Sample};
use crate::batch::{TagList, Value, SAMPLES_PER_BATCH_MAX};
use crate::wire::{varint_elements, walk, walk_fields, Field};

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

/// Prometheus' stale marker: a NaN with this exact bit pattern, sent when a series disappears.
/// It says "no value any more", not a value, so it is skipped rather than rejected.
const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// `Histogram.reset_hint` value `GAUGE`: the histogram is a snapshot, not a running total.
const RESET_HINT_GAUGE: i32 = 3;

/// The subset of upstream `prompb/remote.proto` and `prompb/types.proto` Strata reads, as prost
/// derive structs (no build script, no `protoc`). Field numbers are the upstream ones; fields
/// not listed here (metadata, exemplars) are skipped by the decoder as unknown fields. Label
/// text is read as bytes so invalid UTF-8 rejects one series, not the whole body.
pub mod proto {
    /// `WriteRequest { repeated TimeSeries timeseries = 1; }` (metadata = 3 ignored).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }

    /// `TimeSeries { labels = 1; samples = 2; histograms = 4; }` (exemplars = 3 ignored).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub histograms: Vec<Histogram>,
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

/// Parses one remote write 1.0 body (snappy block format, as the HTTP body arrives).
pub fn parse(body: &[u8], options: &Options) -> Batch {
    batch_of(
        decompress(body).and_then(|raw| decode_protobuf(&raw)),
        options,
    )
}

/// Parses an already decompressed `WriteRequest` (the fuzz targets reach the protobuf decoder
/// through it without having to produce valid snappy).
pub fn parse_decompressed(raw: &[u8], options: &Options) -> Batch {
    let decoded = if raw.len() > DECOMPRESSED_BYTES_MAX {
        Err(Reason::Bound {
            what: "decompressed body size in bytes",
            size: raw.len(),
            max: DECOMPRESSED_BYTES_MAX,
        })
    } else {
        decode_protobuf(raw)
    };
    batch_of(decoded, options)
}

fn batch_of(decoded: Result<proto::WriteRequest, Reason>, options: &Options) -> Batch {
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

/// Decompresses and decodes the body; any failure rejects the whole body.
pub fn decode(body: &[u8]) -> Result<proto::WriteRequest, Reason> {
    decode_protobuf(&decompress(body)?)
}

fn decode_protobuf(raw: &[u8]) -> Result<proto::WriteRequest, Reason> {
    check_counts(raw)?;
    proto::WriteRequest::decode(raw).map_err(|e| malformed(e.to_string()))
}

/// What a decode error names.
const WHAT: &str = "protobuf WriteRequest";

fn malformed(detail: String) -> Reason {
    Reason::Decode { what: WHAT, detail }
}

/// Counts series, labels and samples + histograms on the wire and checks them against their
/// bounds before prost allocates a struct for each.
fn check_counts(raw: &[u8]) -> Result<(), Reason> {
    let (mut series, mut labels, mut points, mut buckets) = (0usize, 0usize, 0usize, 0usize);
    walk(raw, WHAT, &mut |field, payload| {
        if field == 1 {
            series += 1;
            walk(payload, WHAT, &mut |field, histogram| {
                match field {
                    1 => labels += 1,
                    2 => points += 1,
                    4 => {
                        points += 1;
                        buckets += histogram_buckets(histogram)?;
                    }
                    _ => {}
                }
                Ok(())
            })?;
        }
        Ok(())
    })?;
    for (what, size, max) in [
        ("series in the request", series, SERIES_PER_REQUEST_MAX),
        ("labels in the request", labels, LABELS_PER_REQUEST_MAX),
        (
            "samples and histograms in the request",
            points,
            SAMPLES_PER_BATCH_MAX,
        ),
        (
            "native histogram buckets (deltas and spans) in the request",
            buckets,
            BUCKETS_PER_REQUEST_MAX,
        ),
    ] {
        if size > max {
            return Err(Reason::Bound { what, size, max });
        }
    }
    Ok(())
}

/// One native histogram's spans (fields 8, 11) and integer bucket deltas (fields 9, 12, packed
/// or not) as prost will decode them. Float counts are 8 bytes on the wire and decoded alike.
fn histogram_buckets(histogram: &[u8]) -> Result<usize, Reason> {
    let mut buckets = 0usize;
    walk_fields(histogram, WHAT, &mut |number, field| {
        buckets += match (number, field) {
            (8 | 11, Field::Bytes(_)) => 1,
            (9 | 12, field) => varint_elements(field),
            _ => 0,
        };
        Ok(())
    })?;
    Ok(buckets)
}

/// Snappy block decompression, bounded by the declared length before allocating.
fn decompress(body: &[u8]) -> Result<Vec<u8>, Reason> {
    let declared = snap::raw::decompress_len(body).map_err(snappy_error)?;
    if declared > DECOMPRESSED_BYTES_MAX {
        return Err(Reason::Bound {
            what: "decompressed body size in bytes",
            size: declared,
            max: DECOMPRESSED_BYTES_MAX,
        });
    }
    snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(snappy_error)
}

fn snappy_error(e: snap::Error) -> Reason {
    Reason::Decode {
        what: "snappy block",
        detail: e.to_string(),
    }
}

/// The series' metric name and tags, checked against the crate's bounds.
struct SeriesId {
    name: String,
    tags: crate::Tags,
}

/// Adds one series' samples and histograms; `false` once the batch is full.
fn add_series(batch: &mut Batch, index: usize, series: &proto::TimeSeries, o: &Options) -> bool {
    let id = match series_id(&series.labels) {
        Ok(id) => id,
        Err(reason) => {
            batch.reject(|| format!("series {index}"), reason);
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
            Err(reason) => batch.reject(|| at("sample", i), reason),
        }
    }
    for (i, histogram) in series.histograms.iter().enumerate() {
        match native_sample(&id, histogram, o) {
            Ok(s) => {
                if !batch.push(s, || at("histogram", i)) {
                    return false;
                }
            }
            Err(reason) => batch.reject(|| at("histogram", i), reason),
        }
    }
    true
}

/// Name from `__name__`, every other label a tag in the order sent.
fn series_id(labels: &[proto::Label]) -> Result<SeriesId, Reason> {
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
    Ok(SeriesId {
        name: name.to_owned(),
        tags: tags.into(),
    })
}

/// A float sample; `None` for a stale marker.
fn float_sample(id: &SeriesId, s: &proto::Sample, o: &Options) -> Result<Option<Sample>, Reason> {
    if s.value.to_bits() == STALE_NAN_BITS {
        return Ok(None);
    }
    if !s.value.is_finite() {
        return Err(Reason::bad_value("a finite number", &s.value.to_string()));
    }
    let ts_ms = o.check_ts(s.timestamp)?;
    Ok(Some(sample(id, ts_ms, Value::Numeric(s.value))))
}

/// A native histogram. Counter histograms are running totals (the store keeps per-period
/// differences); `reset_hint = GAUGE` ones are snapshots.
fn native_sample(id: &SeriesId, h: &proto::Histogram, o: &Options) -> Result<Sample, Reason> {
    let ts_ms = o.check_ts(h.timestamp)?;
    let converted = convert::from_native(&native(h)).map_err(Reason::Histogram)?;
    let value = if h.reset_hint == RESET_HINT_GAUGE {
        Value::Histogram(converted.histogram)
    } else {
        Value::CumulativeHistogram(converted.histogram)
    };
    Ok(sample(id, ts_ms, value))
}

fn sample(id: &SeriesId, ts_ms: i64, value: Value) -> Sample {
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
