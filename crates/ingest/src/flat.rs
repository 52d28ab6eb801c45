//! The httptrap metric list as a flatbuffer: the binary form of what an httptrap JSON body says,
//! on the same endpoints, chosen by `Content-Type: application/x-circonus-metric-list-flatbuffer`
//! ([`CONTENT_TYPE`]). Schema: `schema/httptrap.fbs`; mapping and semantics: `FORMAT.md`
//! ("httptrap flatbuffers"). Each metric carries its name (already flattened, optionally with a
//! `|ST[…]` suffix), `_tags`, `_ts`, `_fl` and a typed value; every rule and bound of the JSON
//! path applies, so the same metrics parse to the same samples in either encoding.
//!
//! ```
//! use ingest::{flat, Mode, Options, Sample, Value};
//!
//! let sample = Sample {
//!     name: "db`latency".to_owned(),
//!     tags: vec![("db".to_owned(), "orders".to_owned())].into(),
//!     ts_ms: None,
//!     value: Value::Numeric(12.5),
//!     mode: Mode::Set,
//! };
//! let body = flat::encode(std::slice::from_ref(&sample));
//! let batch = flat::parse(&body, &Options::at(1_795_305_600_000));
//! assert_eq!(batch.samples, [sample]);
//! ```

use std::sync::Arc;

use flatbuffers::{FlatBufferBuilder, InvalidFlatbuffer, VerifierOptions, WIPOffset};
use hist::Histogram;

use crate::batch::{
    check_name, check_tag_count, excerpt, Batch, Mode, Options, Reason, Sample, TagList, Tags,
    Value, SAMPLES_PER_BATCH_MAX,
};
use crate::tags::{parse_tag, split_stream_tags, SUFFIX_OPEN};

// flatc's output, checked in unchanged (regenerate: `schema/httptrap.fbs`, first lines). It is
// the crate's only `unsafe` code, and it is not written to our lints or our formatting.
#[allow(
    unsafe_code,
    unused_imports,
    dead_code,
    deprecated,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    mismatched_lifetime_syntaxes,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used
)]
#[rustfmt::skip]
mod httptrap_generated;

/// The generated reader and builder (`schema/httptrap.fbs`), for clients building their own
/// buffers.
pub use httptrap_generated::strata::httptrap as schema;

/// The `Content-Type` that selects this encoding on the httptrap endpoints (IRONdb's name for its
/// flatbuffer metric list, as `shared/spec/ingest-formats.md` gives it).
pub const CONTENT_TYPE: &str = "application/x-circonus-metric-list-flatbuffer";

/// Nesting of tables the verifier accepts: the schema's deepest path is
/// MetricList → Metric → value table (3); a little room for additive schema changes.
const TABLE_DEPTH_MAX: usize = 8;
/// Tables the verifier accepts (each reference counted): a metric is at most two (the metric
/// and its value), plus the root, so every batch `SAMPLES_PER_BATCH_MAX` allows fits.
const TABLES_MAX: usize = 2 * SAMPLES_PER_BATCH_MAX + 1;
/// Bound on the verifier's "apparent size" (every string, vector and table counted each time it
/// is referenced) per body byte. Offsets may point many metrics at one 4 KiB name or one long
/// bin vector, so without it a small body could decode into gigabytes of samples; this bound
/// keeps decoded size proportional to the body, with room for an encoder that shares tag
/// strings and tag vectors between metrics (`encode` does).
const APPARENT_BYTES_PER_BODY_BYTE_MAX: usize = 16;
/// Apparent size every body may have regardless of its length (a few shared names and tags).
const APPARENT_BYTES_SLACK: usize = 64 * 1024;
/// Size of the schema's `Bin` struct on the wire (`val: i8, exp: i8, count: u16`).
const BIN_BYTES: usize = 4;
const _: () = assert!(std::mem::size_of::<schema::Bin>() == BIN_BYTES);

/// Parses a flatbuffer metric list. A buffer the flatbuffers verifier refuses (truncated,
/// offsets out of bounds, invalid UTF-8, a missing required field, over the size bounds) is
/// rejected whole (`rest_of_body`, location `body`, the reason naming the field and vector index
/// the verifier stopped at). Otherwise each metric is accepted or rejected on its own, by the
/// rules of the JSON form (`metric N (`name`)`, N counted from 0 like the verifier's indices).
/// An empty body is an empty list, as for JSON.
pub fn parse(body: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    if body.is_empty() {
        return batch;
    }
    let verifier = VerifierOptions {
        max_depth: TABLE_DEPTH_MAX,
        max_tables: TABLES_MAX,
        max_apparent_size: body
            .len()
            .saturating_mul(APPARENT_BYTES_PER_BODY_BYTE_MAX)
            .saturating_add(APPARENT_BYTES_SLACK),
        ignore_missing_null_terminator: false,
    };
    let list = match flatbuffers::root_with_opts::<schema::MetricList>(&verifier, body) {
        Ok(list) => list,
        Err(error) => {
            batch.reject_rest(|| "body".to_owned(), verifier_reason(&error, &verifier));
            return batch;
        }
    };
    let Some(metrics) = list.metrics() else {
        return batch;
    };
    let mut reader = Reader {
        options,
        tags: TagList::new(),
        previous_tags: Arc::from([]),
        previous_text: None,
        bins: Vec::new(),
        wire: Vec::new(),
    };
    for (index, metric) in metrics.iter().enumerate() {
        let location = || metric_location(index, metric.name());
        match reader.sample(&metric) {
            Ok(sample) => {
                if !batch.push(sample, location) {
                    break;
                }
            }
            Err(reason) => batch.reject(location, reason),
        }
    }
    batch
}

fn metric_location(index: usize, name: &str) -> String {
    format!("metric {index} (`{}`)", excerpt(name))
}

/// A size bound the verifier enforces as a `Reason::Bound` (the server answers 413 for those),
/// anything else as a `Reason::Decode` carrying the verifier's message.
fn verifier_reason(error: &InvalidFlatbuffer, options: &VerifierOptions) -> Reason {
    // The verifier stops at the first reference past the bound.
    let bound = |what, max: usize| Reason::Bound {
        what,
        size: max.saturating_add(1),
        max,
    };
    match error {
        InvalidFlatbuffer::TooManyTables => bound("tables in the flatbuffer", options.max_tables),
        InvalidFlatbuffer::ApparentSizeTooLarge => bound(
            "apparent size in bytes (16 × the body + 64 KiB; shared data counted per reference)",
            options.max_apparent_size,
        ),
        InvalidFlatbuffer::DepthLimitReached => bound("table nesting", options.max_depth),
        _ => Reason::Decode {
            what: "flatbuffer metric list",
            detail: verifier_detail(error),
        },
    }
}

/// The verifier's message on one line: what is wrong, then the path to it
/// ("while verifying vector element 3 … table field `metrics`").
fn verifier_detail(error: &InvalidFlatbuffer) -> String {
    let text = error.to_string();
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    parts.join(", ")
}

/// State kept across the metrics of one body: scratch buffers, and the last tag list with the
/// text it was read from, so that consecutive metrics sending the same tag text share one list
/// without reading it again (metrics of one source usually carry the same tags).
struct Reader<'o, 'a> {
    options: &'o Options,
    tags: TagList,
    previous_tags: Tags,
    /// The `|ST[…]` suffix and `tags` strings `previous_tags` was read from; `None` until a
    /// metric's tags were read successfully.
    previous_text: Option<(&'a str, Vec<&'a str>)>,
    bins: Vec<(hist::Bin, u64)>,
    /// Scratch for a histogram's bins in llhist's binary form.
    wire: Vec<u8>,
}

/// Equal texts; shared strings (one offset in the buffer, as `encode` writes repeated tags) are
/// recognised by address without comparing bytes.
#[inline]
fn same_text(a: &str, b: &str) -> bool {
    a.len() == b.len() && (std::ptr::eq(a.as_ptr(), b.as_ptr()) || a == b)
}

type TagTexts<'a> = flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<&'a str>>;

impl<'a> Reader<'_, 'a> {
    fn sample(&mut self, metric: &schema::Metric<'a>) -> Result<Sample, Reason> {
        // The JSON path's checks; a metric with several problems may be rejected for another
        // one of them than its JSON twin.
        let full = metric.name();
        let suffix_at = full.find(SUFFIX_OPEN);
        let name = suffix_at.map_or(full, |at| &full[..at]);
        let tags = self.tags(full, suffix_at, metric.tags())?;
        let value = self.value(metric)?;
        let ts_ms = metric
            .ts_ms()
            .map(|ts_ms| self.options.check_ts(ts_ms))
            .transpose()?;
        let mode = match metric.mode() {
            schema::Mode::Set => Mode::Set,
            schema::Mode::Accumulate => Mode::Accumulate,
            schema::Mode::Average => Mode::Average,
            other => {
                let found = other.0.to_string();
                return Err(Reason::bad_value("mode Set, Accumulate or Average", &found));
            }
        };
        check_name(name)?;
        Ok(Sample {
            name: name.to_owned(),
            tags,
            ts_ms,
            value,
            mode,
        })
    }

    /// The name's `|ST[…]` tags followed by `tags`, checked against the tag bounds; the
    /// previous metric's list when the text is the same.
    fn tags(
        &mut self,
        full: &'a str,
        suffix_at: Option<usize>,
        texts: Option<TagTexts<'a>>,
    ) -> Result<Tags, Reason> {
        let suffix = suffix_at.map_or("", |at| &full[at..]);
        if let Some((previous_suffix, previous_texts)) = &self.previous_text {
            let same_texts = match texts {
                None => previous_texts.is_empty(),
                Some(texts) => {
                    texts.len() == previous_texts.len()
                        && texts
                            .iter()
                            .zip(previous_texts)
                            .all(|(a, b)| same_text(a, b))
                }
            };
            if same_texts && same_text(suffix, previous_suffix) {
                return Ok(Arc::clone(&self.previous_tags));
            }
        }
        let mut previous_texts = match self.previous_text.take() {
            Some((_, mut texts)) => {
                texts.clear();
                texts
            }
            None => Vec::new(),
        };
        self.tags.clear();
        split_stream_tags(full, &mut self.tags)?;
        for text in texts.iter().flatten() {
            self.tags.push(parse_tag(text)?);
            check_tag_count(self.tags.len())?;
            previous_texts.push(text);
        }
        check_tag_count(self.tags.len())?;
        self.previous_tags = Arc::from(std::mem::take(&mut self.tags));
        self.previous_text = Some((suffix, previous_texts));
        Ok(Arc::clone(&self.previous_tags))
    }

    fn value(&mut self, metric: &schema::Metric<'_>) -> Result<Value, Reason> {
        use schema::Value as V;
        let missing = || Reason::bad_value("a value table of the declared type", "none");
        let numeric = |value: f64| Ok(Value::Numeric(value));
        match metric.value_type() {
            V::NONE => Ok(Value::Null),
            V::Int32 => numeric(f64::from(
                metric.value_as_int_32().ok_or_else(missing)?.value(),
            )),
            V::UInt32 => numeric(f64::from(
                metric.value_as_uint_32().ok_or_else(missing)?.value(),
            )),
            V::Int64 => numeric(metric.value_as_int_64().ok_or_else(missing)?.value() as f64),
            V::UInt64 => numeric(metric.value_as_uint_64().ok_or_else(missing)?.value() as f64),
            V::Double => {
                let value = metric.value_as_double().ok_or_else(missing)?.value();
                if !value.is_finite() {
                    return Err(Reason::bad_value("a finite double", &value.to_string()));
                }
                numeric(value)
            }
            V::Text => {
                let text = metric.value_as_text().ok_or_else(missing)?.value();
                Ok(Value::Text(text.to_owned()))
            }
            V::Histogram => {
                let table = metric.value_as_histogram().ok_or_else(missing)?;
                let histogram = self.histogram(&table)?;
                Ok(if table.cumulative() {
                    Value::CumulativeHistogram(histogram)
                } else {
                    Value::Histogram(histogram)
                })
            }
            other => Err(Reason::bad_value(
                "a value type of the schema (Int32 … Histogram)",
                &other.0.to_string(),
            )),
        }
    }

    /// Bins, single samples and a binary llhist, merged into one histogram.
    fn histogram(&mut self, table: &schema::Histogram<'_>) -> Result<Histogram, Reason> {
        let bins = table.bins();
        let samples = table.samples();
        let entries = bins.map_or(0, |b| b.len()) + samples.map_or(0, |s| s.len());
        // The bins are validated and rewritten in llhist's binary form, which `hist` decodes
        // with a loop that writes its keys and counts in place (ordered, merged and compacted
        // only when needed): 2–3× faster than collecting pairs for `Histogram::from_bins`.
        // The binary form counts bins in a u16; longer lists take the pairs path.
        let mut histogram = match u16::try_from(entries) {
            Ok(entries) => {
                let wire = &mut self.wire;
                wire.clear();
                wire.reserve(2 + usize::from(entries) * 5);
                wire.extend_from_slice(&entries.to_be_bytes());
                // The common case, kept free of calls per bin: the vector's bytes are the
                // structs themselves (`val`, `exp`, `count` little-endian; 4 bytes each).
                let raw = bins.map_or(&[][..], |b| b.bytes());
                debug_assert_eq!(raw.len() % BIN_BYTES, 0);
                for (index, bin) in raw.chunks_exact(BIN_BYTES).enumerate() {
                    let &[val_byte, exp_byte, low, high] = bin else {
                        continue;
                    };
                    let (val, exp) = (val_byte as i8, exp_byte as i8);
                    let regular = (10..=99).contains(&val.unsigned_abs());
                    if !regular && val != 0 && (val, exp) != (-1, 0) {
                        return Err(bad_bin(index, val, exp));
                    }
                    // The zero bin is (0, e) for any e; written as (0, 0).
                    let exp_byte = if val == 0 { 0 } else { exp_byte };
                    if high == 0 {
                        wire.extend_from_slice(&[val_byte, exp_byte, 0, low]);
                    } else {
                        wire.extend_from_slice(&[val_byte, exp_byte, 1, low, high]);
                    }
                }
                for_each_entry(None, samples, &mut |bin, _| {
                    let (val, exp) = (bin.val().to_le_bytes()[0], bin.exp().to_le_bytes()[0]);
                    wire.extend_from_slice(&[val, exp, 0, 1]);
                })?;
                Histogram::decode(wire).map_err(|e| Reason::Decode {
                    what: "histogram bins",
                    detail: e.to_string(),
                })?
            }
            Err(_) => {
                let pairs = &mut self.bins;
                pairs.clear();
                for_each_entry(bins, samples, &mut |bin, count| {
                    pairs.push((bin, u64::from(count)))
                })?;
                Histogram::from_bins(pairs.drain(..))
            }
        };
        if let Some(llhist) = table.llhist() {
            let decoded = Histogram::decode(llhist.bytes()).map_err(|e| Reason::Decode {
                what: "llhist",
                detail: e.to_string(),
            })?;
            if histogram.is_empty() {
                histogram = decoded;
            } else {
                histogram.merge(&decoded);
            }
        }
        Ok(histogram)
    }
}

fn bad_bin(index: usize, val: i8, exp: i8) -> Reason {
    let found = format!("bin {index}: val {val}, exp {exp}");
    Reason::bad_value(
        "a bin: val ±10..=99, or 0 (zero), or -1 with exp 0 (NaN)",
        &found,
    )
}

/// Calls `f` with each valid bin and its count, then with each sample's bin and 1; an invalid
/// bin or a non-finite sample is the metric's rejection, naming its index.
fn for_each_entry(
    bins: Option<flatbuffers::Vector<'_, schema::Bin>>,
    samples: Option<flatbuffers::Vector<'_, f64>>,
    f: &mut dyn FnMut(hist::Bin, u16),
) -> Result<(), Reason> {
    for (index, bin) in bins.iter().flatten().enumerate() {
        let valid = hist::Bin::new(bin.val(), bin.exp());
        let valid = valid.ok_or_else(|| bad_bin(index, bin.val(), bin.exp()))?;
        f(valid, bin.count());
    }
    for (index, sample) in samples.iter().flatten().enumerate() {
        if !sample.is_finite() {
            let found = format!("sample {index}: {sample}");
            return Err(Reason::bad_value("a finite sample", &found));
        }
        f(hist::Bin::from_f64(sample), 1);
    }
    Ok(())
}

/// How `encode_with` writes histograms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistogramForm {
    /// A vector of 4-byte `Bin` structs, the fastest to read; bins holding more than 65,535
    /// samples go in the llhist part.
    Bins,
    /// The binary llhist (3 bytes + the count's bytes per bin): the smallest.
    Llhist,
}

/// Encodes samples as a flatbuffer metric list (histograms as `Bin` vectors), for tests, the
/// load generator and clients. Tags go in the `tags` list, a part written as `b"<base64>"` where
/// the `cat:val` form could not carry it; identical tag strings and consecutive identical tag
/// lists are written once. `parse` reads the result back to the same samples, for every sample
/// the JSON form can carry (a name holding `|ST[` cannot be sent in either).
pub fn encode(samples: &[Sample]) -> Vec<u8> {
    encode_with(samples, HistogramForm::Bins)
}

/// `encode` with a choice of histogram form.
pub fn encode_with(samples: &[Sample], form: HistogramForm) -> Vec<u8> {
    let mut builder = FlatBufferBuilder::new();
    let mut metrics = Vec::with_capacity(samples.len());
    let mut previous: Option<(&Tags, WIPOffset<_>)> = None;
    let mut entries = Vec::new();
    for sample in samples {
        let name = builder.create_string(&sample.name);
        let tags = match previous {
            Some((tags, offset)) if **tags == *sample.tags => Some(offset),
            _ if sample.tags.is_empty() => None,
            _ => {
                let strings: Vec<_> = sample
                    .tags
                    .iter()
                    .map(|(category, value)| {
                        builder.create_shared_string(&tag_text(category, value))
                    })
                    .collect();
                let offset = builder.create_vector(&strings);
                previous = Some((&sample.tags, offset));
                Some(offset)
            }
        };
        let (value_type, value) = match &sample.value {
            Value::Null => (schema::Value::NONE, None),
            Value::Numeric(v) => {
                let args = schema::DoubleArgs { value: *v };
                let table = schema::Double::create(&mut builder, &args);
                (schema::Value::Double, Some(table.as_union_value()))
            }
            Value::Text(text) => {
                let value = Some(builder.create_string(text));
                let table = schema::Text::create(&mut builder, &schema::TextArgs { value });
                (schema::Value::Text, Some(table.as_union_value()))
            }
            Value::Histogram(h) | Value::CumulativeHistogram(h) => {
                let cumulative = matches!(sample.value, Value::CumulativeHistogram(_));
                let mut args = schema::HistogramArgs {
                    cumulative,
                    ..Default::default()
                };
                match form {
                    HistogramForm::Bins => {
                        // Bins over a `Bin`'s u16 count travel in the llhist part.
                        entries.clear();
                        let mut large = Vec::new();
                        for (bin, count) in h.bins() {
                            match u16::try_from(count) {
                                Ok(count) => {
                                    entries.push(schema::Bin::new(bin.val(), bin.exp(), count))
                                }
                                Err(_) => large.push((bin, count)),
                            }
                        }
                        args.bins = Some(builder.create_vector(&entries));
                        if !large.is_empty() {
                            let bytes = Histogram::from_bins(large).to_bytes();
                            args.llhist = Some(builder.create_vector(&bytes));
                        }
                    }
                    HistogramForm::Llhist => {
                        args.llhist = Some(builder.create_vector(&h.to_bytes()));
                    }
                }
                let table = schema::Histogram::create(&mut builder, &args);
                (schema::Value::Histogram, Some(table.as_union_value()))
            }
        };
        let mode = match sample.mode {
            Mode::Set => schema::Mode::Set,
            Mode::Accumulate => schema::Mode::Accumulate,
            Mode::Average => schema::Mode::Average,
        };
        let args = schema::MetricArgs {
            name: Some(name),
            tags,
            ts_ms: sample.ts_ms,
            mode,
            value_type,
            value,
        };
        metrics.push(schema::Metric::create(&mut builder, &args));
    }
    let metrics = Some(builder.create_vector(&metrics));
    let list = schema::MetricList::create(&mut builder, &schema::MetricListArgs { metrics });
    schema::finish_metric_list_buffer(&mut builder, list);
    builder.finished_data().to_vec()
}

/// `cat:val` as `parse_tag` reads it back: a category holding `:` or starting with `b"`, and a
/// value starting with `b"`, are written as `b"<base64>"`.
fn tag_text(category: &str, value: &str) -> String {
    let encode = |text: &str| {
        format!(
            "b\"{}\"",
            base64_simd::STANDARD.encode_to_string(text.as_bytes())
        )
    };
    let category = if category.contains(':') || category.starts_with("b\"") {
        encode(category)
    } else {
        category.to_owned()
    };
    if value.is_empty() {
        return category;
    }
    if value.starts_with("b\"") {
        return format!("{category}:{}", encode(value));
    }
    format!("{category}:{value}")
}
