//! The one internal batch type every wire format is parsed into, and the bounds every parser
//! enforces. A batch is what one request body (or one datagram) becomes: the accepted samples in
//! input order, and a rejection naming the place and the reason for everything else.

use std::fmt;
use std::sync::Arc;

/// Samples one batch may hold; beyond it the rest of the body is rejected (the server answers
/// 413), so a single request can never make the parser allocate without limit.
pub const SAMPLES_PER_BATCH_MAX: usize = 1_000_000;
/// Stream tags on one sample (after merging name, `_tags` and protocol tags).
pub const TAGS_PER_SAMPLE_MAX: usize = 64;
/// Bytes in a metric name (after flattening and after removing a `|ST[…]` suffix).
pub const NAME_BYTES_MAX: usize = 4096;
/// Bytes in one tag category or one tag value (after `b"…"` decoding).
pub const TAG_BYTES_MAX: usize = 1024;
/// httptrap JSON nesting depth (objects and arrays), as the spec allows.
pub const JSON_DEPTH_MAX: usize = 32;
/// Rejections listed in a batch; further ones are only counted (`rejected_total`), because a
/// body of garbage lines would otherwise turn into a larger list of error strings.
pub const REJECTIONS_LISTED_MAX: usize = 100;

/// 1990-01-01T00:00:00Z: nothing Strata stores is older than this, so a smaller timestamp is a
/// unit mistake (seconds sent as milliseconds) rather than data.
pub const TS_MIN_MS_DEFAULT: i64 = 631_152_000_000;
/// One year: clocks are wrong by minutes, not years; further ahead is a unit mistake.
pub const TS_AHEAD_MS_MAX_DEFAULT: i64 = 365 * 24 * 3600 * 1000;

/// Options every parser takes: the time of receipt and the window a timestamp must fall in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Time of receipt, ms since the epoch (the window is relative to it; tests pin it).
    pub now_ms: i64,
    /// Oldest timestamp accepted, ms since the epoch.
    pub ts_min_ms: i64,
    /// How far past `now_ms` a timestamp may lie.
    pub ts_ahead_ms_max: i64,
}

impl Options {
    /// The default window around a receipt time.
    pub fn at(now_ms: i64) -> Options {
        Options {
            now_ms,
            ts_min_ms: TS_MIN_MS_DEFAULT,
            ts_ahead_ms_max: TS_AHEAD_MS_MAX_DEFAULT,
        }
    }

    /// `Ok` if `ts_ms` lies in the window, the rejection reason otherwise.
    pub fn check_ts(&self, ts_ms: i64) -> Result<i64, Reason> {
        let ts_max_ms = self.now_ms.saturating_add(self.ts_ahead_ms_max);
        if ts_ms < self.ts_min_ms || ts_ms > ts_max_ms {
            return Err(Reason::Timestamp {
                ts_ms,
                ts_min_ms: self.ts_min_ms,
                ts_max_ms,
            });
        }
        Ok(ts_ms)
    }
}

/// Stream tags, `(category, value)` in the order given. Shared, because every field of an
/// Influx line (every value of a statsd line) carries the same tags: one clone is a count bump.
pub type Tags = Arc<[(String, String)]>;
/// Tags while a parser collects them.
pub(crate) type TagList = Vec<(String, String)>;

/// How a sample combines with what the stream already holds in its period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The value replaces the previous one (the default).
    Set,
    /// Added to the previous value (httptrap `_fl: "+"`, statsd counters and gauge deltas).
    Accumulate,
    /// Averaged over the period, weighted by count (httptrap `_fl: "~"`).
    Average,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Every numeric type on the wire (int32 … uint64, double) as f64: exact up to 2^53.
    Numeric(f64),
    Text(String),
    /// Samples to merge into the stream's histogram for the period.
    Histogram(hist::Histogram),
    /// A running total since some start (httptrap `_type: "H"`); the store keeps per-period
    /// differences.
    CumulativeHistogram(hist::Histogram),
    /// A running total in the sender's own buckets (Prometheus native and custom-bucket
    /// histograms, OTel exponential and explicit ones): differenced in those buckets, where a
    /// bucket that grew never looks like a reset, and only then converted to llhist.
    Cumulative(hist::convert::Cumulative),
    /// The metric is present with no value (JSON `null`).
    Null,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    /// Stream tags as given (order kept, `b"…"` parts decoded); canonical sorting and escaping
    /// are the store's job.
    pub tags: Tags,
    /// Milliseconds since the epoch; `None` = at receipt.
    pub ts_ms: Option<i64>,
    pub value: Value,
    pub mode: Mode,
}

/// Why something was rejected. Displayed in the response body next to the location.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// The input does not follow the protocol's grammar.
    Syntax { expected: &'static str },
    /// Bytes that are not UTF-8 where text is required.
    InvalidUtf8,
    /// A size bound was exceeded (`what` names the bound).
    Bound {
        what: &'static str,
        size: usize,
        max: usize,
    },
    /// A value that cannot be read as what the protocol or the declared type requires.
    BadValue {
        expected: &'static str,
        found: String,
    },
    /// httptrap `_type` other than `i I l L n s h H`.
    BadType { found: String },
    /// A stream tag that cannot be read (`detail` says what is wrong).
    BadTag { detail: &'static str, found: String },
    /// An empty metric name.
    EmptyName,
    /// A timestamp outside the accepted window.
    Timestamp {
        ts_ms: i64,
        ts_min_ms: i64,
        ts_max_ms: i64,
    },
    /// The input is well formed but names something Strata does not ingest (DogStatsD events).
    Unsupported { what: &'static str },
    /// A binary body (snappy, protobuf) that cannot be decoded; `what` names the layer.
    Decode { what: &'static str, detail: String },
    /// A source histogram (native, OTLP) that cannot be converted into llhist bins.
    Histogram(hist::convert::ConvertError),
}

/// Longest excerpt of offending input quoted in a reason.
const FOUND_BYTES_MAX: usize = 64;

/// Quotes offending input for a reason, cut at a character boundary.
pub(crate) fn excerpt(text: &str) -> String {
    if text.len() <= FOUND_BYTES_MAX {
        return text.to_owned();
    }
    let mut end = FOUND_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl Reason {
    pub(crate) fn bad_value(expected: &'static str, found: &str) -> Reason {
        Reason::BadValue {
            expected,
            found: excerpt(found),
        }
    }

    pub(crate) fn bad_tag(detail: &'static str, found: &str) -> Reason {
        Reason::BadTag {
            detail,
            found: excerpt(found),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Syntax { expected } => write!(f, "syntax error: expected {expected}"),
            Reason::InvalidUtf8 => write!(f, "invalid UTF-8"),
            Reason::Bound { what, size, max } => write!(f, "{what} is {size}, over the max {max}"),
            Reason::BadValue { expected, found } => write!(f, "expected {expected}, got `{found}`"),
            Reason::BadType { found } => {
                write!(
                    f,
                    "unknown _type `{found}` (expected one of i I l L n s h H)"
                )
            }
            Reason::BadTag { detail, found } => write!(f, "bad tag `{found}`: {detail}"),
            Reason::EmptyName => write!(f, "empty metric name"),
            Reason::Timestamp {
                ts_ms,
                ts_min_ms,
                ts_max_ms,
            } => write!(
                f,
                "timestamp {ts_ms} ms is outside the accepted window [{ts_min_ms}, {ts_max_ms}] ms"
            ),
            Reason::Unsupported { what } => write!(f, "{what} are not supported"),
            Reason::Decode { what, detail } => write!(f, "cannot decode {what}: {detail}"),
            Reason::Histogram(error) => write!(f, "bad histogram: {error}"),
        }
    }
}

/// Where and why something was rejected.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// "line 7, column 12", "document 2, key `a`b`", "document 1, line 3, column 5 (byte 40)".
    pub location: String,
    pub reason: Reason,
    /// True when parsing stopped here: everything after `location` was rejected too (a JSON
    /// syntax error, a batch over `SAMPLES_PER_BATCH_MAX`). The server answers 4xx for these.
    pub rest_of_body: bool,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.reason)?;
        if self.rest_of_body {
            write!(f, " (the rest of the body was not read)")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub samples: Vec<Sample>,
    /// The first `REJECTIONS_LISTED_MAX` rejections, in input order.
    pub rejected: Vec<Rejection>,
    /// Every rejection, listed or not (httptrap's `filtered`).
    pub rejected_total: usize,
    /// Metric family metadata the body carried, in body order (at most
    /// `METADATA_PER_BATCH_MAX`; the rest is dropped, not rejected).
    pub metadata: Vec<MetadataOwned>,
    /// Exemplars the body carried, in body order (at most `EXEMPLARS_PER_BATCH_MAX`; the rest
    /// is dropped, not rejected).
    pub exemplars: Vec<ExemplarOwned>,
}

/// Metadata entries a [`Batch`] keeps.
pub const METADATA_PER_BATCH_MAX: usize = 100_000;

/// Exemplars a [`Batch`] (or a sink that collects them) keeps per body.
pub const EXEMPLARS_PER_BATCH_MAX: usize = 100_000;

impl Batch {
    /// True when a rejection stopped the parse (see `Rejection::rest_of_body`).
    pub fn stopped(&self) -> bool {
        self.rejected.iter().any(|r| r.rest_of_body)
    }

    /// Rejects one sample, line, key or document. The location is only built for listed
    /// rejections: a body of a million bad lines must not cost a million strings.
    pub(crate) fn reject_one(&mut self, location: impl FnOnce() -> String, reason: Reason) {
        self.push_rejection(location, reason, false);
    }

    pub(crate) fn reject_rest(&mut self, location: impl FnOnce() -> String, reason: Reason) {
        self.push_rejection(location, reason, true);
    }

    fn push_rejection(
        &mut self,
        location: impl FnOnce() -> String,
        reason: Reason,
        rest_of_body: bool,
    ) {
        self.rejected_total += 1;
        // A stopping rejection is always listed: the server's status code depends on it.
        if self.rejected.len() < REJECTIONS_LISTED_MAX || rest_of_body {
            self.rejected.push(Rejection {
                location: location(),
                reason,
                rest_of_body,
            });
        }
    }

    /// Adds a sample; `false` (and a stopping rejection) once the batch is full.
    pub(crate) fn push(&mut self, sample: Sample, location: impl FnOnce() -> String) -> bool {
        if self.samples.len() >= SAMPLES_PER_BATCH_MAX {
            let size = self.samples.len() + 1;
            self.reject_rest(
                location,
                Reason::Bound {
                    what: "samples in the batch",
                    size,
                    max: SAMPLES_PER_BATCH_MAX,
                },
            );
            return false;
        }
        self.samples.push(sample);
        true
    }
}

/// Checks a name against `NAME_BYTES_MAX` and emptiness.
pub(crate) fn check_name(name: &str) -> Result<(), Reason> {
    if name.is_empty() {
        return Err(Reason::EmptyName);
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(Reason::Bound {
            what: "name length in bytes",
            size: name.len(),
            max: NAME_BYTES_MAX,
        });
    }
    Ok(())
}

/// Checks one tag's parts against `TAG_BYTES_MAX` and an empty category.
pub(crate) fn check_tag(category: &str, value: &str) -> Result<(), Reason> {
    if category.is_empty() {
        return Err(Reason::bad_tag("empty category", value));
    }
    let size = category.len().max(value.len());
    if size > TAG_BYTES_MAX {
        return Err(Reason::Bound {
            what: "tag category or value length in bytes",
            size,
            max: TAG_BYTES_MAX,
        });
    }
    Ok(())
}

/// Checks the number of tags against `TAGS_PER_SAMPLE_MAX`.
pub(crate) fn check_tag_count(count: usize) -> Result<(), Reason> {
    if count > TAGS_PER_SAMPLE_MAX {
        return Err(Reason::Bound {
            what: "tags on one sample",
            size: count,
            max: TAGS_PER_SAMPLE_MAX,
        });
    }
    Ok(())
}

/// A metric family's type as Prometheus names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricType {
    Unknown,
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
}

impl MetricType {
    /// Prometheus's name for it (`/api/v1/metadata`'s `type`).
    pub fn name(self) -> &'static str {
        match self {
            MetricType::Unknown => "unknown",
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::GaugeHistogram => "gaugehistogram",
            MetricType::Summary => "summary",
            MetricType::Info => "info",
            MetricType::StateSet => "stateset",
        }
    }

    /// The type named so (`None` for a name Prometheus does not use).
    pub fn from_name(name: &str) -> Option<MetricType> {
        Some(match name {
            "unknown" => MetricType::Unknown,
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "gaugehistogram" => MetricType::GaugeHistogram,
            "summary" => MetricType::Summary,
            "info" => MetricType::Info,
            "stateset" => MetricType::StateSet,
            _ => return None,
        })
    }
}

/// An exemplar (`sink::Exemplar`) owned, as [`Batch`] keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct ExemplarOwned {
    /// The labels of the series it belongs to, `__name__` among them, as sent.
    pub series: Vec<(String, String)>,
    /// Its own labels (`trace_id`, …).
    pub labels: Vec<(String, String)>,
    pub value: f64,
    pub ts_ms: i64,
}

/// A metric family's metadata (`sink::Metadata`) owned, as [`Batch`] keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataOwned {
    pub family: String,
    pub kind: MetricType,
    pub help: String,
    pub unit: String,
}
