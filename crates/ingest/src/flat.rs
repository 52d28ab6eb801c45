//! The httptrap metric list as a flatbuffer: the binary form of what an httptrap JSON body says,
//! on the same endpoints, chosen by `Content-Type: application/x-circonus-metric-list-flatbuffer`
//! ([`CONTENT_TYPE`]). Schema (version 3, file identifier `STH3`): `schema/httptrap.fbs`;
//! mapping and semantics: `FORMAT.md` ("httptrap flatbuffers"). A body holds documents; each has
//! one string table (names and `cat:val` tag texts, written once and referenced by 16-bit
//! index), tag sets, and one 6-byte struct per metric; numeric values sit in two typed columns
//! (`ints` for values exactly an i32, `doubles` for the rest), and histogram bins, text values
//! and own timestamps in further side vectors, all consumed in metric order. Every rule and
//! bound of the JSON path applies, so the same metrics parse to the same samples in either
//! encoding.
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

use std::collections::HashMap;
use std::sync::Arc;

use flatbuffers::{FlatBufferBuilder, Follow, InvalidFlatbuffer, Vector, VerifierOptions};
use hist::Histogram;

use crate::batch::{
    check_name, check_tag_count, excerpt, Batch, Mode, Options, Reason, Sample, TagList, Tags,
    Value, SAMPLES_PER_BATCH_MAX,
};
use crate::sink::{
    HistogramRef, Lookup, Name, Point, RawSeries, Scope, Series, Sink, TagsRef, ValueRef,
};
use crate::tags::{parse_tag, plain_suffix, split_stream_tags, suffix_tags_owned, PlainSuffix};

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
/// flatbuffer metric list, as `docs/spec/ingest-formats.md` gives it).
pub const CONTENT_TYPE: &str = "application/x-circonus-metric-list-flatbuffer";

/// The file identifier of the schema version read here (bytes 4..8 of a body).
pub const FILE_IDENTIFIER: &str = "STH3";
/// Earlier versions' identifiers, never shipped and no longer read: a body carrying one is
/// rejected naming its version. 1: one table per metric; 2: a 16-byte metric struct with its
/// value inline.
const FILE_IDENTIFIERS_OLD: [(&[u8; 4], u32); 2] = [(b"STHT", 1), (b"STH2", 2)];

/// Nesting of tables the verifier accepts: MetricList → Document (2); room for additive changes.
const TABLE_DEPTH_MAX: usize = 8;
/// Documents in one body; each brings its own string table.
pub const DOCUMENTS_PER_BODY_MAX: usize = 65_536;
/// Tables the verifier accepts (each reference counted): the root and the documents.
const TABLES_MAX: usize = DOCUMENTS_PER_BODY_MAX + 1;
/// Tag sets one document can reference (`Metric.tags` is a u16, 0 meaning none).
pub const TAG_SETS_PER_DOCUMENT_MAX: usize = u16::MAX as usize;
/// Strings one document may hold (names and tag texts are referenced by u16 index); a document
/// with more is rejected with the body.
pub const STRINGS_PER_DOCUMENT_MAX: usize = u16::MAX as usize + 1;
/// Bound on decoded bytes per body byte: the verifier's "apparent size" (every string and vector
/// counted each time it is referenced), and separately the name and tag bytes that samples copy
/// out of the string table (names are shared by index, so 6 bytes of metric can copy a 4 KiB
/// name). Keeps decoded size proportional to the body, with room for real reuse.
const DECODED_BYTES_PER_BODY_BYTE_MAX: usize = 16;
/// Decoded bytes every body may have regardless of its length (a few shared names and tags).
const DECODED_BYTES_SLACK: usize = 64 * 1024;
/// Size of the schema's `Bin` struct on the wire (`val: i8, exp: i8, count: u16`).
const BIN_BYTES: usize = 4;
const _: () = assert!(std::mem::size_of::<schema::Bin>() == BIN_BYTES);
/// Size of the schema's `Metric` struct on the wire (`name: u16, tags: u16, kind: u8,
/// flags: u8`).
const METRIC_BYTES: usize = 6;
const _: () = assert!(std::mem::size_of::<schema::Metric>() == METRIC_BYTES);
/// Size of the schema's `HistogramEnds` struct on the wire.
const HISTOGRAM_ENDS_BYTES: usize = 8;
const _: () = assert!(std::mem::size_of::<schema::HistogramEnds>() == HISTOGRAM_ENDS_BYTES);

/// `Metric.flags` bits 0–1: the mode.
const FLAGS_MODE_MASK: u8 = 0b11;
/// `Metric.flags` bits 2–3: where the timestamp comes from.
const FLAGS_TS_SHIFT: u8 = 2;
const FLAGS_TS_MASK: u8 = 0b11 << FLAGS_TS_SHIFT;
/// Timestamp sources (`flags` bits 2–3).
const TS_AT_RECEIPT: u8 = 0;
const TS_DOCUMENT: u8 = 1;
const TS_OWN: u8 = 2;
/// `Metric.flags` bits 4–7 are reserved and must be zero.
const FLAGS_RESERVED_MASK: u8 = 0xf0;

/// Parses a flatbuffer metric list (schema version 3). A buffer with another file identifier or
/// that the flatbuffers verifier refuses (truncated, offsets out of bounds, invalid UTF-8, over
/// the size bounds) is rejected whole (`rest_of_body`, location `body`, the reason naming the
/// field and vector index the verifier stopped at). Otherwise each metric is accepted or rejected
/// on its own, by the rules of the JSON form (location `document D, metric N (`name`)`, both
/// counted from 0 like the verifier's indices). An empty body is an empty list, as for JSON.
pub fn parse(body: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_into(body, options, &mut batch);
    batch
}

/// Reads a flatbuffer metric list into `sink`, with every check and rejection of [`parse`]
/// (which is this into the owned batch): the body is verified whole first, so a body rejected
/// whole is one `reject` call and nothing else. Names, tag sets and histogram bins are lent from
/// the body and the reader (a name's plain `|ST[…]` suffix unsplit, with the name as its raw
/// series bytes, when no tag set joins it). At most `SAMPLES_PER_BATCH_MAX` metrics are handed
/// over; the one after rejects the rest of the body.
pub fn parse_into<S: Sink>(body: &[u8], options: &Options, sink: &mut S) {
    if body.is_empty() {
        return;
    }
    let whole = |sink: &mut S, reason| sink.reject(&|| "body".to_owned(), reason, Scope::Whole);
    if let Err(reason) = check_identifier(body) {
        return whole(sink, reason);
    }
    let decoded_bytes_max = body
        .len()
        .saturating_mul(DECODED_BYTES_PER_BODY_BYTE_MAX)
        .saturating_add(DECODED_BYTES_SLACK);
    let verifier = VerifierOptions {
        max_depth: TABLE_DEPTH_MAX,
        max_tables: TABLES_MAX,
        max_apparent_size: decoded_bytes_max,
        ignore_missing_null_terminator: false,
    };
    let list = match flatbuffers::root_with_opts::<schema::MetricList>(&verifier, body) {
        Ok(list) => list,
        Err(error) => return whole(sink, verifier_reason(&error, &verifier)),
    };
    if let Err(reason) = check_vectors(&list, body.len()) {
        return whole(sink, reason);
    }
    let mut shared = Shared {
        options,
        decoded_bytes: 0,
        decoded_bytes_max,
        accepted: 0,
        no_tags: Arc::from([]),
        tags: TagList::new(),
        keys: Vec::new(),
        counts: Vec::new(),
    };
    for (index, document) in list.documents().iter().flatten().enumerate() {
        let mut reader = DocumentReader::new(index, &document, &mut shared);
        if !reader.read(sink) {
            break;
        }
    }
}
/// Every metric, value, bin, histogram entry, timestamp and llhist byte becomes decoded data,
/// so the vectors holding them must fit in the body side by side: documents pointing at one
/// shared vector (which the verifier allows, counting it per reference up to 16 × the body)
/// would otherwise decode into more samples than the body has bytes. A document's strings must
/// be reachable by a 16-bit index.
fn check_vectors(list: &schema::MetricList<'_>, body_bytes: usize) -> Result<(), Reason> {
    let mut vector_bytes = 0usize;
    for d in list.documents().iter().flatten() {
        let strings = d.strings().map_or(0, |v| v.len());
        if strings > STRINGS_PER_DOCUMENT_MAX {
            return Err(Reason::Bound {
                what: "strings in one document (16-bit indices)",
                size: strings,
                max: STRINGS_PER_DOCUMENT_MAX,
            });
        }
        vector_bytes += d.metrics().map_or(0, |v| v.len() * METRIC_BYTES)
            + d.ints().map_or(0, |v| v.len() * 4)
            + d.doubles().map_or(0, |v| v.len() * 8)
            + d.bins().map_or(0, |v| v.len() * BIN_BYTES)
            + d.histograms().map_or(0, |v| v.len() * HISTOGRAM_ENDS_BYTES)
            + d.timestamps_ms().map_or(0, |v| v.len() * 8)
            + d.llhist().map_or(0, |v| v.len())
            + d.native().map_or(0, |v| v.len());
    }
    if vector_bytes > body_bytes {
        return Err(Reason::Bound {
            what: "bytes of metric, value, bin, histogram, timestamp, llhist and native \
                   vectors (documents sharing them), against the body's",
            size: vector_bytes,
            max: body_bytes,
        });
    }
    Ok(())
}

/// The body must carry version 3's identifier; earlier versions are named as such.
fn check_identifier(body: &[u8]) -> Result<(), Reason> {
    let found = body.get(4..8).unwrap_or(&[]);
    if found == FILE_IDENTIFIER.as_bytes() {
        return Ok(());
    }
    let old = FILE_IDENTIFIERS_OLD
        .iter()
        .find(|(identifier, _)| found == identifier.as_slice());
    let detail = if let Some((identifier, version)) = old {
        format!(
            "schema version {version} (file identifier {}) is no longer read; send version 3 \
             ({FILE_IDENTIFIER}, schema/httptrap.fbs)",
            String::from_utf8_lossy(identifier.as_slice())
        )
    } else {
        format!(
            "file identifier {:?} (bytes 4..8), expected {FILE_IDENTIFIER:?}",
            String::from_utf8_lossy(found)
        )
    };
    Err(Reason::Decode {
        what: "flatbuffer metric list",
        detail,
    })
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
/// ("while verifying vector element 3 … table field `strings`").
fn verifier_detail(error: &InvalidFlatbuffer) -> String {
    let text = error.to_string();
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    parts.join(", ")
}

/// Element `index` of an optional vector, `None` when absent or out of range (the generated
/// `get` asserts its index).
#[inline]
fn item<'a, T: Follow<'a> + 'a>(vector: Option<Vector<'a, T>>, index: usize) -> Option<T::Inner> {
    vector.filter(|v| index < v.len()).map(|v| v.get(index))
}

/// State kept across the documents of one body: the decoded-size budget and scratch buffers.
struct Shared<'o> {
    options: &'o Options,
    /// Name and tag bytes copied into samples so far, against `decoded_bytes_max`.
    decoded_bytes: usize,
    decoded_bytes_max: usize,
    /// Metrics handed to the sink so far, against `SAMPLES_PER_BATCH_MAX`.
    accepted: usize,
    /// The empty tag list every untagged sample shares.
    no_tags: Tags,
    /// Scratch for tags being read.
    tags: TagList,
    /// Scratch for a histogram's keys and counts.
    keys: Vec<u16>,
    counts: Vec<u64>,
}

/// A name from the string table, read once per document: the part before `|ST[…]` and the
/// suffix's tags.
struct NameEntry<'a> {
    name: &'a str,
    /// The suffix's tags, split (empty when `plain` holds them).
    suffix_tags: Tags,
    /// A plain suffix lent unsplit (`Metric::suffix`) while no tag set joins it.
    plain: Option<PlainSuffix<'a>>,
}

impl NameEntry<'_> {
    fn suffix_empty(&self) -> bool {
        self.suffix_tags.is_empty() && self.plain.is_none()
    }

    fn suffix_count(&self) -> usize {
        self.plain
            .map_or(self.suffix_tags.len(), |plain| plain.count)
    }
}

type Strings<'a> = Vector<'a, flatbuffers::ForwardsUOffset<&'a str>>;

/// Reads one document's metrics; names, tag sets and name + tag set combinations are read once
/// and shared by every metric referencing them.
struct DocumentReader<'a, 'o, 's> {
    index: usize,
    document: schema::Document<'a>,
    shared: &'s mut Shared<'o>,
    strings: Option<Strings<'a>>,
    /// The numeric value columns, consumed in metric order.
    ints: Option<Vector<'a, i32>>,
    doubles: Option<Vector<'a, f64>>,
    /// Per string: 0 = not read as a name yet, k = `names[k - 1]`.
    name_slots: Vec<u32>,
    names: Vec<Result<NameEntry<'a>, Reason>>,
    /// Per tag set, once read.
    tag_sets: Vec<Option<Result<Tags, Reason>>>,
    /// The last (name string, tag set) combination with both parts non-empty, and its tags.
    combined: Option<(u16, u16, Tags)>,
    /// Combinations built so far in this document (each gets its own `tags_id`).
    combined_serial: u64,
    /// The next entry of each side vector.
    next_int: usize,
    next_double: usize,
    next_ts: usize,
    next_text: usize,
    next_histogram: usize,
    bins_start: usize,
    llhist_start: usize,
    native_start: usize,
}

/// Why a metric was rejected, and whether the rest of the body goes with it.
enum Stop {
    Metric(Reason),
    Body(Reason),
}

impl From<Reason> for Stop {
    fn from(reason: Reason) -> Stop {
        Stop::Metric(reason)
    }
}

impl<'a, 'o, 's> DocumentReader<'a, 'o, 's> {
    fn new(
        index: usize,
        document: &schema::Document<'a>,
        shared: &'s mut Shared<'o>,
    ) -> DocumentReader<'a, 'o, 's> {
        // At most `STRINGS_PER_DOCUMENT_MAX` (`check_vectors`).
        let strings = document.strings();
        let tag_set_count = document
            .tag_set_ends()
            .map_or(0, |e| e.len().min(TAG_SETS_PER_DOCUMENT_MAX));
        DocumentReader {
            index,
            document: *document,
            shared,
            strings,
            ints: document.ints(),
            doubles: document.doubles(),
            name_slots: vec![0; strings.map_or(0, |s| s.len().min(STRINGS_PER_DOCUMENT_MAX))],
            names: Vec::new(),
            tag_sets: vec![None; tag_set_count],
            combined: None,
            combined_serial: 0,
            next_int: 0,
            next_double: 0,
            next_ts: 0,
            next_text: 0,
            next_histogram: 0,
            bins_start: 0,
            llhist_start: 0,
            native_start: 0,
        }
    }

    /// Hands the document's metrics and rejections to `sink`; false once the rest of the
    /// body is rejected or the sink stopped.
    fn read<S: Sink>(&mut self, sink: &mut S) -> bool {
        let Some(metrics) = self.document.metrics() else {
            return true;
        };
        sink.document(self.index, metrics.len());
        // The structs' bytes, 6 per metric (verified as one vector): read without per-field
        // calls into the generated accessors.
        let raw = metrics.bytes();
        debug_assert_eq!(raw.len(), metrics.len() * METRIC_BYTES);
        for (index, bytes) in raw.chunks_exact(METRIC_BYTES).enumerate() {
            let Ok(bytes) = <&[u8; METRIC_BYTES]>::try_from(bytes) else {
                continue;
            };
            let metric = schema::Metric(*bytes);
            let location = |this: &Self| {
                let name = item(this.strings, metric.name() as usize).unwrap_or("");
                format!(
                    "document {}, metric {index} (`{}`)",
                    this.index,
                    excerpt(name)
                )
            };
            let full = self.shared.accepted >= SAMPLES_PER_BATCH_MAX;
            match self.sample(&metric) {
                Ok(_) if full => {
                    let size = self.shared.accepted + 1;
                    let reason = Reason::Bound {
                        what: "samples in the batch",
                        size,
                        max: SAMPLES_PER_BATCH_MAX,
                    };
                    sink.reject(&|| location(self), reason, Scope::Rest);
                    return false;
                }
                Ok(prepared) => {
                    self.shared.accepted += 1;
                    let (series, point) = self.lend(prepared);
                    if !sink.sample(&series, point) {
                        return false;
                    }
                }
                Err(Stop::Metric(reason)) => {
                    sink.reject(&|| location(self), reason, Scope::One);
                }
                Err(Stop::Body(reason)) => {
                    sink.reject(&|| location(self), reason, Scope::Rest);
                    return false;
                }
            }
        }
        true
    }

    /// The series and point of a prepared metric, borrowing its tags and bins from the reader.
    #[inline]
    fn lend<'r>(&'r self, prepared: Prepared<'a>) -> (Series<'r>, Point<'r>) {
        let no_tags = &self.shared.no_tags;
        let list = |id, tags| TagsRef::List { id, tags };
        let tags = match prepared.tags {
            TagsAt::None => list(0, no_tags),
            TagsAt::Set(set) => match self.tag_sets.get(set) {
                Some(Some(Ok(tags))) => list(set as u64 + 1, tags),
                _ => {
                    debug_assert!(false, "tag set {set} read");
                    list(0, no_tags)
                }
            },
            TagsAt::Suffix(slot) => match self.names.get(slot) {
                Some(Ok(entry)) => match entry.plain {
                    Some(plain) => TagsRef::Suffix(plain.text),
                    None => list(TAGS_ID_SUFFIX + slot as u64, &entry.suffix_tags),
                },
                _ => {
                    debug_assert!(false, "name {slot} read");
                    list(0, no_tags)
                }
            },
            TagsAt::Combined => match &self.combined {
                Some((_, _, tags)) => list(TAGS_ID_COMBINED + self.combined_serial, tags),
                None => {
                    debug_assert!(false, "combination read");
                    list(0, no_tags)
                }
            },
        };
        // A name's own suffix alone: the name (suffix included) determines the series.
        let raw = match tags {
            TagsRef::Suffix(text) => Some(RawSeries {
                first: prepared.name.as_bytes(),
                second: text.as_bytes(),
            }),
            _ => None,
        };
        let histogram = |h: PreparedHistogram| match h {
            PreparedHistogram::Sorted => HistogramRef::Sorted {
                keys: &self.shared.keys,
                counts: &self.shared.counts,
            },
            PreparedHistogram::Built(h) => HistogramRef::Built(h),
        };
        let value = match prepared.value {
            PreparedValue::Null => ValueRef::Null,
            PreparedValue::Numeric(v) => ValueRef::Numeric(v),
            PreparedValue::Text(text) => ValueRef::Text(text),
            PreparedValue::Histogram(h) => ValueRef::Histogram(histogram(h)),
            PreparedValue::CumulativeHistogram(h) => ValueRef::CumulativeHistogram(histogram(h)),
            PreparedValue::Native(c) => ValueRef::Cumulative(c),
        };
        let series = Series {
            name: Name::new(prepared.name),
            tags,
            lookup: Lookup::NotAsked,
            raw,
            index: None,
        };
        let point = Point {
            ts_ms: prepared.ts_ms,
            value,
            mode: prepared.mode,
        };
        (series, point)
    }

    // Inlined into `read` (one call per metric; out of line it cost ~10 ns per numeric).
    #[inline(always)]
    fn sample(&mut self, metric: &schema::Metric) -> Result<Prepared<'a>, Stop> {
        // Side vectors are consumed first, whatever else is wrong with the metric, so that one
        // rejected metric does not shift the entries of the ones after it.
        let flags = metric.flags();
        let ts_ms = match (flags & FLAGS_TS_MASK) >> FLAGS_TS_SHIFT {
            TS_AT_RECEIPT => Ok(None),
            TS_DOCUMENT => self
                .document
                .ts_ms()
                .ok_or_else(|| Reason::bad_value("a document `ts_ms` (flags name it)", "none"))
                .map(Some),
            TS_OWN => {
                let at = self.next_ts;
                self.next_ts += 1;
                item(self.document.timestamps_ms(), at)
                    .ok_or_else(|| missing_entry("timestamps_ms", at))
                    .map(Some)
            }
            other => Err(Reason::bad_value(
                "timestamp flags 0, 1 or 2",
                &other.to_string(),
            )),
        };
        let value = self.value(metric);
        if flags & FLAGS_RESERVED_MASK != 0 {
            return Err(Reason::bad_value("flags bits 4–7 zero", &flags.to_string()).into());
        }
        let mode = match flags & FLAGS_MODE_MASK {
            0 => Mode::Set,
            1 => Mode::Accumulate,
            2 => Mode::Average,
            other => {
                return Err(Reason::bad_value("mode 0, 1 or 2", &other.to_string()).into());
            }
        };
        let (name, tags) = self.name_and_tags(metric.name(), metric.tags())?;
        let value = value?;
        let ts_ms = ts_ms?
            .map(|ts_ms| self.shared.options.check_ts(ts_ms))
            .transpose()?;
        // Charged as when every sample copied its name, so the same bodies are refused.
        self.charge(name.len())?;
        Ok(Prepared {
            name,
            tags,
            ts_ms,
            value,
            mode,
        })
    }

    /// Counts decoded bytes against the body's budget; over it, the rest of the body is rejected.
    fn charge(&mut self, bytes: usize) -> Result<(), Stop> {
        self.shared.decoded_bytes = self.shared.decoded_bytes.saturating_add(bytes);
        if self.shared.decoded_bytes > self.shared.decoded_bytes_max {
            return Err(Stop::Body(Reason::Bound {
                what: "decoded name and tag bytes (16 × the body + 64 KiB)",
                size: self.shared.decoded_bytes,
                max: self.shared.decoded_bytes_max,
            }));
        }
        Ok(())
    }

    /// The name (without `|ST[…]`) and where the sample's tags are: the suffix's, then the tag
    /// set's. Shared lists are read once and lent to every metric using them.
    fn name_and_tags(&mut self, name_at: u16, tag_set: u16) -> Result<(&'a str, TagsAt), Stop> {
        let slot = self.name(name_at)?;
        let (name, suffix_empty) = match &self.names[slot] {
            Ok(entry) => (entry.name, entry.suffix_empty()),
            Err(reason) => return Err(reason.clone().into()),
        };
        let suffix = if suffix_empty {
            TagsAt::None
        } else {
            TagsAt::Suffix(slot)
        };
        if tag_set == 0 {
            return Ok((name, suffix));
        }
        let set = usize::from(tag_set) - 1;
        let set_empty = self.tag_set(set)?;
        if suffix_empty {
            return Ok((name, TagsAt::Set(set)));
        }
        if set_empty {
            return Ok((name, suffix));
        }
        if let Some((name_at_before, set_before, _)) = &self.combined {
            if (*name_at_before, *set_before) == (name_at, tag_set) {
                return Ok((name, TagsAt::Combined));
            }
        }
        let (Ok(entry), Some(Some(Ok(set_tags)))) = (&self.names[slot], self.tag_sets.get(set))
        else {
            debug_assert!(false, "name and tag set read");
            return Err(Reason::bad_value("a tag set inside `tag_set_ends`", "").into());
        };
        let count = entry.suffix_count() + set_tags.len();
        check_tag_count(count)?;
        let mut combined = Vec::with_capacity(count);
        match entry.plain {
            Some(plain) => combined.extend(suffix_tags_owned(plain.text)),
            None => combined.extend(entry.suffix_tags.iter().cloned()),
        }
        combined.extend(set_tags.iter().cloned());
        self.charge(tag_bytes(&combined))?;
        let tags: Tags = combined.into();
        self.combined = Some((name_at, tag_set, tags));
        self.combined_serial += 1;
        Ok((name, TagsAt::Combined))
    }

    /// The index in `names` of the name at string `at`, read on first use.
    fn name(&mut self, at: u16) -> Result<usize, Stop> {
        let index = usize::from(at);
        let Some(&slot) = self.name_slots.get(index) else {
            let found = format!("name {at} of {} strings", self.name_slots.len());
            return Err(Reason::bad_value("a name index inside `strings`", &found).into());
        };
        if slot != 0 {
            return Ok(slot as usize - 1);
        }
        let entry = self.read_name(index);
        self.names.push(entry);
        // At most one entry per string, so the count fits the slot type.
        self.name_slots[index] = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        Ok(self.names.len() - 1)
    }

    fn read_name(&mut self, index: usize) -> Result<NameEntry<'a>, Reason> {
        let full = item(self.strings, index).unwrap_or("");
        if let Some(plain) = plain_suffix(full) {
            check_name(plain.name)?;
            return Ok(NameEntry {
                name: plain.name,
                suffix_tags: Arc::clone(&self.shared.no_tags),
                plain: Some(plain),
            });
        }
        let tags = &mut self.shared.tags;
        tags.clear();
        let name = split_stream_tags(full, tags)?;
        check_name(name)?;
        let suffix_tags = if tags.is_empty() {
            Arc::clone(&self.shared.no_tags)
        } else {
            Arc::from(std::mem::take(tags))
        };
        Ok(NameEntry {
            name,
            suffix_tags,
            plain: None,
        })
    }

    /// Reads tag set `set` on first use (kept in `tag_sets`); whether it is empty.
    fn tag_set(&mut self, set: usize) -> Result<bool, Reason> {
        let Some(slot) = self.tag_sets.get(set) else {
            let found = format!("tag set {} of {}", set + 1, self.tag_sets.len());
            return Err(Reason::bad_value("a tag set inside `tag_set_ends`", &found));
        };
        if let Some(read) = slot {
            return read
                .as_ref()
                .map(|tags| tags.is_empty())
                .map_err(Clone::clone);
        }
        let read = self.read_tag_set(set);
        if let Ok(tags) = &read {
            // Each set is charged once, when read: metrics share it.
            let bytes = tag_bytes(tags);
            self.shared.decoded_bytes = self.shared.decoded_bytes.saturating_add(bytes);
        }
        let empty = read
            .as_ref()
            .map(|tags| tags.is_empty())
            .map_err(Clone::clone);
        self.tag_sets[set] = Some(read);
        empty
    }

    fn read_tag_set(&mut self, set: usize) -> Result<Tags, Reason> {
        let ends = self.document.tag_set_ends();
        let start = if set == 0 {
            Some(0)
        } else {
            item(ends, set - 1)
        };
        let (Some(start), Some(end)) = (start, item(ends, set)) else {
            return Err(Reason::bad_value("a tag set inside `tag_set_ends`", ""));
        };
        let texts = self.document.tag_texts();
        let (start, end) = (start as usize, end as usize);
        if start > end || end > texts.map_or(0, |t| t.len()) {
            let found = format!("tag set {set}: {start}..{end}");
            return Err(Reason::bad_value(
                "ends inside `tag_texts`, never decreasing",
                &found,
            ));
        }
        check_tag_count(end - start)?;
        let tags = &mut self.shared.tags;
        tags.clear();
        for at in start..end {
            let text_at = item(texts, at).map_or(usize::MAX, usize::from);
            let text = item(self.strings, text_at).ok_or_else(|| {
                let found = format!("tag text {text_at}");
                Reason::bad_value("a tag text index inside `strings`", &found)
            })?;
            tags.push(parse_tag(text)?);
        }
        Ok(if tags.is_empty() {
            Arc::clone(&self.shared.no_tags)
        } else {
            Arc::from(std::mem::take(tags))
        })
    }

    fn value(&mut self, metric: &schema::Metric) -> Result<PreparedValue<'a>, Reason> {
        match metric.kind() {
            schema::Kind::Null => Ok(PreparedValue::Null),
            schema::Kind::Int => {
                let at = self.next_int;
                self.next_int += 1;
                let value = item(self.ints, at).ok_or_else(|| missing_entry("ints", at))?;
                Ok(PreparedValue::Numeric(f64::from(value)))
            }
            schema::Kind::Double => {
                let at = self.next_double;
                self.next_double += 1;
                let value = item(self.doubles, at).ok_or_else(|| missing_entry("doubles", at))?;
                if !value.is_finite() {
                    return Err(Reason::bad_value("a finite value", &value.to_string()));
                }
                Ok(PreparedValue::Numeric(value))
            }
            schema::Kind::Text => {
                let at = self.next_text;
                self.next_text += 1;
                let text =
                    item(self.document.texts(), at).ok_or_else(|| missing_entry("texts", at))?;
                Ok(PreparedValue::Text(text))
            }
            schema::Kind::Histogram => self.histogram().map(PreparedValue::Histogram),
            schema::Kind::CumulativeHistogram => {
                self.histogram().map(PreparedValue::CumulativeHistogram)
            }
            schema::Kind::Native => self.native().map(PreparedValue::Native),
            other => Err(Reason::bad_value(
                "kind Null, Int, Double, Text, Histogram, CumulativeHistogram or Native",
                &other.0.to_string(),
            )),
        }
    }

    /// The next histogram entry: its bins and its llhist part, merged into one histogram.
    fn histogram(&mut self) -> Result<PreparedHistogram, Reason> {
        let at = self.next_histogram;
        self.next_histogram += 1;
        let ends =
            item(self.document.histograms(), at).ok_or_else(|| missing_entry("histograms", at))?;
        let all_bins = self.document.bins().map_or(&[][..], |b| b.bytes());
        let all_llhist = self.document.llhist().map_or(&[][..], |b| b.bytes());
        let (bins_end, llhist_end) = (ends.bins_end() as usize, ends.llhist_end() as usize);
        let bins = all_bins.get(self.bins_start * BIN_BYTES..bins_end.saturating_mul(BIN_BYTES));
        let llhist = all_llhist.get(self.llhist_start..llhist_end);
        let (Some(bins), Some(llhist)) = (bins, llhist) else {
            let found = format!(
                "histogram {at}: bins {}..{bins_end} of {}, llhist {}..{llhist_end} of {}",
                self.bins_start,
                all_bins.len() / BIN_BYTES,
                self.llhist_start,
                all_llhist.len()
            );
            return Err(Reason::bad_value(
                "ends inside `bins` and `llhist`, never decreasing",
                &found,
            ));
        };
        let first_bin = self.bins_start;
        self.bins_start = bins_end;
        self.llhist_start = llhist_end;
        let prepared = self.histogram_of_bins(bins, first_bin)?;
        if llhist.is_empty() {
            return Ok(prepared);
        }
        let decoded = Histogram::decode(llhist).map_err(|e| Reason::Decode {
            what: "llhist",
            detail: e.to_string(),
        })?;
        let mut histogram = match prepared {
            PreparedHistogram::Sorted if self.shared.keys.is_empty() => {
                return Ok(PreparedHistogram::Built(decoded))
            }
            PreparedHistogram::Sorted => {
                Histogram::from_sorted_keys(&self.shared.keys, &self.shared.counts)
            }
            PreparedHistogram::Built(histogram) => histogram,
        };
        histogram.merge(&decoded);
        Ok(PreparedHistogram::Built(histogram))
    }

    /// The next running total in its sender's own buckets. Entries are self-delimiting, so
    /// one that does not decode leaves no way to find the next: the rest of the document's
    /// `Native` metrics are rejected with it (`native_start` moves to the end).
    fn native(&mut self) -> Result<hist::convert::Cumulative, Reason> {
        let all = self.document.native().map_or(&[][..], |b| b.bytes());
        let Some(rest) = all.get(self.native_start..).filter(|r| !r.is_empty()) else {
            return Err(missing_entry("native", self.native_start));
        };
        match hist::convert::Cumulative::decode_prefix(rest) {
            Ok((cumulative, used)) => {
                debug_assert!(used > 0 && used <= rest.len());
                self.native_start += used;
                Ok(cumulative)
            }
            Err(e) => {
                let at = self.native_start;
                self.native_start = all.len();
                Err(Reason::Decode {
                    what: "native running total",
                    detail: format!("byte {} of `native`: bad {}", at + e.offset, e.what),
                })
            }
        }
    }

    /// `raw`: `Bin` structs (4 bytes each), the first being `bins[first]` (for error messages).
    /// `Sorted`: the keys and counts are in `shared.keys` and `shared.counts`.
    fn histogram_of_bins(&mut self, raw: &[u8], first: usize) -> Result<PreparedHistogram, Reason> {
        debug_assert_eq!(raw.len() % BIN_BYTES, 0);
        // Encoders write a histogram's bins in storage order (`Histogram::bins`), so the common
        // case is keys strictly ascending with non-zero counts: validated here in one pass and
        // copied into the histogram as they are (one allocation per vector, no sort).
        let Shared { keys, counts, .. } = &mut *self.shared;
        keys.clear();
        counts.clear();
        if raw.is_empty() {
            return Ok(PreparedHistogram::Sorted);
        }
        keys.reserve(raw.len() / BIN_BYTES);
        counts.reserve(raw.len() / BIN_BYTES);
        let mut in_order = true;
        let mut previous: Option<u16> = None;
        for (index, bin) in raw.chunks_exact(BIN_BYTES).enumerate() {
            let &[val, exp, low, high] = bin else {
                continue;
            };
            let (val, exp) = (val as i8, exp as i8);
            let key =
                crate::bins::bin_key(val, exp).ok_or_else(|| bad_bin(first + index, val, exp))?;
            let count = u16::from_le_bytes([low, high]);
            in_order &= count != 0 && previous.is_none_or(|p| p < key);
            previous = Some(key);
            keys.push(key);
            counts.push(u64::from(count));
        }
        if in_order {
            return Ok(PreparedHistogram::Sorted);
        }
        // Any order, repeats and zero counts (every bin valid, checked above): `from_bins`
        // sorts and merges.
        let pairs = raw.chunks_exact(BIN_BYTES).filter_map(|bin| {
            let &[val, exp, low, high] = bin else {
                return None;
            };
            let valid = hist::Bin::new(val as i8, exp as i8)?;
            Some((valid, u64::from(u16::from_le_bytes([low, high]))))
        });
        Ok(PreparedHistogram::Built(Histogram::from_bins(pairs)))
    }
}

/// The tag-list id ([`TagsRef::List`]) of a name's suffix tags: this plus the name's slot.
const TAGS_ID_SUFFIX: u64 = 1 << 32;
/// The tag-list id ([`TagsRef::List`]) of a name's suffix tags with a tag set: this plus the
/// combination's serial.
const TAGS_ID_COMBINED: u64 = 2 << 32;

/// A metric that passed every check, its borrowed parts still in the reader.
struct Prepared<'a> {
    name: &'a str,
    tags: TagsAt,
    ts_ms: Option<i64>,
    value: PreparedValue<'a>,
    mode: Mode,
}

/// Where a prepared metric's tags are.
#[derive(Clone, Copy)]
enum TagsAt {
    None,
    /// `tag_sets[set]`.
    Set(usize),
    /// `names[slot]`'s suffix tags.
    Suffix(usize),
    /// `combined`.
    Combined,
}

enum PreparedValue<'a> {
    Null,
    Numeric(f64),
    Text(&'a str),
    Histogram(PreparedHistogram),
    CumulativeHistogram(PreparedHistogram),
    Native(hist::convert::Cumulative),
}

enum PreparedHistogram {
    /// In `Shared::keys` and `Shared::counts`.
    Sorted,
    Built(Histogram),
}
fn missing_entry(vector: &'static str, at: usize) -> Reason {
    Reason::BadValue {
        expected: "an entry of the side vector the metric's kind or flags name",
        found: format!("{vector}[{at}] missing"),
    }
}

fn bad_bin(index: usize, val: i8, exp: i8) -> Reason {
    let found = format!("bin {index}: val {val}, exp {exp}");
    Reason::bad_value(
        "a bin: val ±10..=99, or 0 (zero), or -1 with exp 0 (NaN)",
        &found,
    )
}

/// Bytes a tag list holds (its strings), for the decoded-size budget.
fn tag_bytes(tags: &[(String, String)]) -> usize {
    tags.iter().map(|(c, v)| c.len() + v.len()).sum()
}

/// How `encode_with` writes histograms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistogramForm {
    /// `Bin` structs (4 bytes each), the fastest to read; bins holding more than 65,535 samples
    /// go in the llhist part.
    Bins,
    /// The binary llhist (3 bytes + the count's bytes per bin): the smallest.
    Llhist,
}

/// Encodes samples as a flatbuffer metric list (histograms as `Bin` vectors), for tests, the
/// load generator and clients. Names and tag texts are written once per document (a new
/// document starts when the strings or tag sets of one are full); tags go in tag sets of
/// `cat:val` texts, a part written as `b"<base64>"` where the `cat:val` form could not carry it;
/// numeric values that are exactly an i32 go in `ints`, the others in `doubles`; the most
/// common timestamp is the document's. `parse` reads the result back to
/// the same samples, for every sample the JSON form can carry (a name holding `|ST[` cannot be
/// sent in either).
pub fn encode(samples: &[Sample]) -> Vec<u8> {
    encode_with(samples, HistogramForm::Bins)
}

/// `encode` with a choice of histogram form.
pub fn encode_with(samples: &[Sample], form: HistogramForm) -> Vec<u8> {
    let mut builder = FlatBufferBuilder::new();
    let mut documents = Vec::new();
    let mut rest = samples;
    while !rest.is_empty() {
        let mut encoder = DocumentEncoder::default();
        let used = encoder.add(rest, form);
        debug_assert!(used > 0, "every document takes at least one sample");
        rest = &rest[used.max(1).min(rest.len())..];
        documents.push(encoder.finish(&mut builder));
    }
    let documents = Some(builder.create_vector(&documents));
    let list = schema::MetricList::create(&mut builder, &schema::MetricListArgs { documents });
    schema::finish_metric_list_buffer(&mut builder, list);
    builder.finished_data().to_vec()
}

/// One document being encoded.
#[derive(Default)]
struct DocumentEncoder {
    strings: Vec<String>,
    string_at: HashMap<String, u16>,
    tag_texts: Vec<u16>,
    tag_set_ends: Vec<u32>,
    /// Tag sets by content (the text indices), and the last one for the common repeat.
    tag_set_at: HashMap<Vec<u16>, u16>,
    last_tags: Option<(Tags, u16)>,
    ts_ms: Option<i64>,
    metrics: Vec<schema::Metric>,
    ints: Vec<i32>,
    doubles: Vec<f64>,
    timestamps_ms: Vec<i64>,
    texts: Vec<String>,
    histograms: Vec<schema::HistogramEnds>,
    bins: Vec<schema::Bin>,
    llhist: Vec<u8>,
    native: Vec<u8>,
}

impl DocumentEncoder {
    /// Adds samples from the front of `samples` until the document's strings or tag sets are
    /// full; returns how many it took (at least one).
    fn add(&mut self, samples: &[Sample], form: HistogramForm) -> usize {
        self.ts_ms = most_common_ts(samples);
        for (taken, sample) in samples.iter().enumerate() {
            // The strings this sample may add: its name and its tag texts.
            let new_strings = 1 + sample.tags.len().min(TAG_TEXTS_PER_SAMPLE_ENCODED);
            if taken > 0 && self.strings.len() + new_strings > STRINGS_PER_DOCUMENT_MAX {
                return taken;
            }
            let Some(tags) = self.tags(&sample.tags) else {
                return taken;
            };
            let name = self.string(&sample.name);
            let mode = match sample.mode {
                Mode::Set => 0,
                Mode::Accumulate => 1,
                Mode::Average => 2,
            };
            let ts = match sample.ts_ms {
                None => TS_AT_RECEIPT,
                Some(ts_ms) if Some(ts_ms) == self.ts_ms => TS_DOCUMENT,
                Some(ts_ms) => {
                    self.timestamps_ms.push(ts_ms);
                    TS_OWN
                }
            };
            let flags = mode | ts << FLAGS_TS_SHIFT;
            let kind = match &sample.value {
                Value::Null => schema::Kind::Null,
                Value::Numeric(v) => match exact_i32(*v) {
                    Some(v) => {
                        self.ints.push(v);
                        schema::Kind::Int
                    }
                    None => {
                        self.doubles.push(*v);
                        schema::Kind::Double
                    }
                },
                Value::Text(text) => {
                    self.texts.push(text.clone());
                    schema::Kind::Text
                }
                Value::Histogram(h) => {
                    self.histogram(h, form);
                    schema::Kind::Histogram
                }
                Value::CumulativeHistogram(h)
                | Value::Cumulative(hist::convert::Cumulative::Bins(h)) => {
                    self.histogram(h, form);
                    schema::Kind::CumulativeHistogram
                }
                // Sent in its own buckets: converted to bins before it is differenced, a bucket
                // that grew could read as a reset.
                Value::Cumulative(c) => {
                    c.encode_into(&mut self.native);
                    schema::Kind::Native
                }
            };
            self.metrics
                .push(schema::Metric::new(name, tags, kind, flags));
        }
        samples.len()
    }

    /// The index of `text` in the string table (`add` keeps the table within 16-bit indices).
    fn string(&mut self, text: &str) -> u16 {
        if let Some(&at) = self.string_at.get(text) {
            return at;
        }
        let at = u16::try_from(self.strings.len()).unwrap_or(u16::MAX);
        self.strings.push(text.to_owned());
        self.string_at.insert(text.to_owned(), at);
        at
    }

    /// The tag set field for `tags` (0 = none); `None` when the document has no room for a new
    /// set.
    fn tags(&mut self, tags: &Tags) -> Option<u16> {
        if tags.is_empty() {
            return Some(0);
        }
        if let Some((last, set)) = &self.last_tags {
            if Arc::ptr_eq(last, tags) || **last == **tags {
                return Some(*set);
            }
        }
        let texts: Vec<u16> = tags
            .iter()
            .take(TAG_TEXTS_PER_SAMPLE_ENCODED)
            .map(|(category, value)| self.string(&tag_text(category, value)))
            .collect();
        let set = match self.tag_set_at.get(&texts) {
            Some(&set) => set,
            None => {
                if self.tag_set_ends.len() >= TAG_SETS_PER_DOCUMENT_MAX {
                    return None;
                }
                self.tag_texts.extend_from_slice(&texts);
                let end = u32::try_from(self.tag_texts.len()).unwrap_or(u32::MAX);
                self.tag_set_ends.push(end);
                let set = u16::try_from(self.tag_set_ends.len()).unwrap_or(u16::MAX);
                self.tag_set_at.insert(texts, set);
                set
            }
        };
        self.last_tags = Some((Arc::clone(tags), set));
        Some(set)
    }

    fn histogram(&mut self, h: &Histogram, form: HistogramForm) {
        match form {
            HistogramForm::Bins => {
                // Bins over a `Bin`'s u16 count travel in the llhist part.
                let mut large = Vec::new();
                for (bin, count) in h.bins() {
                    match u16::try_from(count) {
                        Ok(count) => self
                            .bins
                            .push(schema::Bin::new(bin.val(), bin.exp(), count)),
                        Err(_) => large.push((bin, count)),
                    }
                }
                if !large.is_empty() {
                    Histogram::from_bins(large).encode_into(&mut self.llhist);
                }
            }
            HistogramForm::Llhist => {
                if !h.is_empty() {
                    h.encode_into(&mut self.llhist);
                }
            }
        }
        let end = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
        self.histograms.push(schema::HistogramEnds::new(
            end(self.bins.len()),
            end(self.llhist.len()),
        ));
    }

    fn finish<'b>(
        self,
        builder: &mut FlatBufferBuilder<'b>,
    ) -> flatbuffers::WIPOffset<schema::Document<'b>> {
        let strings: Vec<_> = self
            .strings
            .iter()
            .map(|s| builder.create_string(s))
            .collect();
        let texts: Vec<_> = self
            .texts
            .iter()
            .map(|s| builder.create_string(s))
            .collect();
        let args = schema::DocumentArgs {
            strings: Some(builder.create_vector(&strings)),
            tag_texts: (!self.tag_texts.is_empty()).then(|| builder.create_vector(&self.tag_texts)),
            tag_set_ends: (!self.tag_set_ends.is_empty())
                .then(|| builder.create_vector(&self.tag_set_ends)),
            ts_ms: self.ts_ms,
            metrics: Some(builder.create_vector(&self.metrics)),
            ints: (!self.ints.is_empty()).then(|| builder.create_vector(&self.ints)),
            doubles: (!self.doubles.is_empty()).then(|| builder.create_vector(&self.doubles)),
            timestamps_ms: (!self.timestamps_ms.is_empty())
                .then(|| builder.create_vector(&self.timestamps_ms)),
            texts: (!texts.is_empty()).then(|| builder.create_vector(&texts)),
            histograms: (!self.histograms.is_empty())
                .then(|| builder.create_vector(&self.histograms)),
            bins: (!self.bins.is_empty()).then(|| builder.create_vector(&self.bins)),
            llhist: (!self.llhist.is_empty()).then(|| builder.create_vector(&self.llhist)),
            native: (!self.native.is_empty()).then(|| builder.create_vector(&self.native)),
        };
        schema::Document::create(builder, &args)
    }
}

/// Tags `encode` writes for one sample: all but one string of an empty document. More could not
/// be referenced by 16-bit indices; `parse` rejects any sample with more than
/// `TAGS_PER_SAMPLE_MAX` (64) tags either way.
const TAG_TEXTS_PER_SAMPLE_ENCODED: usize = STRINGS_PER_DOCUMENT_MAX - 1;

/// `value` as an i32 when that is exactly the same f64 (bit for bit: not -0.0, NaN, ±inf, a
/// fraction or out of range), the form `Kind::Int` carries.
fn exact_i32(value: f64) -> Option<i32> {
    // `as` saturates and maps NaN to 0; the bit comparison catches every such case.
    let int = value as i32;
    (f64::from(int).to_bits() == value.to_bits()).then_some(int)
}

/// The timestamp most samples carry (the document default), if any carries one.
fn most_common_ts(samples: &[Sample]) -> Option<i64> {
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for ts_ms in samples.iter().filter_map(|s| s.ts_ms) {
        *counts.entry(ts_ms).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|&(ts_ms, count)| (count, std::cmp::Reverse(ts_ms)))
        .map(|(ts_ms, _)| ts_ms)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// One metric as handed over: (document, tags_id, tags, name, whether its suffix was
    /// lent unsplit).
    type Seen = (usize, u64, TagList, String, bool);

    /// Records what a visit hands over.
    #[derive(Default)]
    struct Recorder {
        document: usize,
        seen: Vec<Seen>,
        rejected: usize,
    }

    /// The id recorded for a suffix lent unsplit (it has none).
    const LENT: u64 = u64::MAX;

    impl Sink for Recorder {
        fn document(&mut self, index: usize, _metrics: usize) {
            self.document = index;
        }

        fn sample(&mut self, series: &Series<'_>, _point: Point<'_>) -> bool {
            let (id, tags, lent) = match series.tags {
                TagsRef::Suffix(text) => (LENT, suffix_tags_owned(text).collect(), true),
                TagsRef::List { id, tags } => (id, tags.to_vec(), false),
                other => panic!("flatbuffers lend no {other:?}"),
            };
            assert_eq!(
                series.raw.is_some(),
                lent,
                "raw bytes go with a lent suffix"
            );
            let name = series.name.to_string();
            self.seen.push((self.document, id, tags, name, lent));
            true
        }

        fn reject(&mut self, _location: &dyn Fn() -> String, _reason: Reason, _scope: Scope) {
            self.rejected += 1;
        }
    }

    fn sample(name: &str, tags: &[(&str, &str)]) -> Sample {
        let tags: Vec<(String, String)> = tags
            .iter()
            .map(|(c, v)| ((*c).to_owned(), (*v).to_owned()))
            .collect();
        Sample {
            name: name.to_owned(),
            tags: tags.into(),
            ts_ms: None,
            value: Value::Numeric(1.0),
            mode: Mode::Set,
        }
    }

    /// Equal `tags_id`s within a document carry equal tags, across tag sets, name suffixes and
    /// their combinations; the visit hands over what `parse` keeps.
    #[test]
    fn equal_tags_ids_mean_equal_tags() {
        let samples = vec![
            sample("a", &[("host", "1")]),
            sample("b", &[("host", "2")]),
            sample("a", &[]),
            sample("s|ST[app:x]", &[]),
            sample("s|ST[app:x]", &[("host", "1")]),
            sample("s|ST[app:x]", &[("host", "2")]),
            sample("t|ST[app:y]", &[("host", "1")]),
            sample("s|ST[app:x]", &[("host", "1")]),
            sample("b", &[("host", "2")]),
            // A suffix that is decoded, not lent.
            sample("u|ST[b\"YXBw\":x]", &[]),
        ];
        let body = encode(&samples);
        let mut recorder = Recorder::default();
        parse_into(&body, &Options::at(1_795_305_600_000), &mut recorder);
        assert_eq!(recorder.rejected, 0);
        let parsed = parse(&body, &Options::at(1_795_305_600_000));
        assert_eq!(recorder.seen.len(), parsed.samples.len());
        for ((_, _, tags, name, _), sample) in recorder.seen.iter().zip(&parsed.samples) {
            assert_eq!((name, &tags[..]), (&sample.name, &sample.tags[..]));
        }
        let mut by_id: HashMap<(usize, u64), &TagList> = HashMap::new();
        for (document, id, tags, _, _) in recorder.seen.iter().filter(|s| !s.4) {
            let first = by_id.entry((*document, *id)).or_insert(tags);
            assert_eq!(*first, tags, "tags_id {id}");
        }
        // Suffix tags and their combinations were handed over (not only plain sets), a
        // suffix alone lent unsplit.
        assert!(recorder
            .seen
            .iter()
            .any(|s| (TAGS_ID_COMBINED..LENT).contains(&s.1)));
        assert!(recorder.seen.iter().any(|s| s.4));
        assert!(recorder
            .seen
            .iter()
            .any(|s| (TAGS_ID_SUFFIX..TAGS_ID_COMBINED).contains(&s.1)));
    }
}
