//! Conversions into llhist from the histogram families users send: Prometheus native histograms
//! (exponential schemas −4..=8 and custom bounds, schema −53), OTel exponential histograms, and
//! classic explicit-bound buckets (Prometheus `_bucket{le}`, OTel explicit bounds).
//!
//! Base-2 and explicit buckets do not line up with decimal bins. Each source bucket `(a, b]` is
//! split across the llhist bins it overlaps in proportion to the log-width of each overlap,
//! `ln(hi/lo) / ln(b/a)` (spec §11), with cumulative rounding inside the bucket (a bin receives
//! `round(c·F_after) − round(c·F_before)`), so every bucket's integer count lands exactly and the
//! converted histogram holds exactly the source's samples. Negative buckets mirror positive ones.
//!
//! The edge cases, decided once for every family (and written in `FORMAT.md`, "Conversions"):
//! - the zero bucket (Prometheus `zero_count`, OTel `zero_count`) goes to the llhist zero bin,
//!   whatever its threshold;
//! - a bucket with lower bound 0 or that contains 0 is split *linearly* (a log-width from 0 is
//!   infinite), sharing a bucket that crosses 0 between the two signs by length;
//! - a first bucket `(−inf, b]`: `(0, b]` split linearly when `b > 0` (Prometheus assumes a lower
//!   bound of 0), else all its samples at the bin of `b`;
//! - a last bucket `(a, +inf)`: all its samples at the bin of `a`, the last finite bound
//!   (Prometheus's `histogram_quantile` caps there too); a single bucket `(−inf, +inf)` says
//!   nothing about values and goes to the NaN bin;
//! - an OTel `min`/`max` narrows the bucket it falls in (so `(−inf, b]` becomes `(min, b]`);
//! - parts of buckets at magnitudes ≥ 1e128 go to the NaN bin, below 1e-128 to the zero bin;
//! - float counts are rounded cumulatively over the whole histogram, so the converted total is
//!   the rounded source total;
//! - samples counted in the source's `count` but in no bucket (Prometheus counts NaN observations
//!   that way) go to the NaN bin, so `sample_count()` equals the source count; a count *smaller*
//!   than its buckets is an error for integer sources;
//! - negative or non-finite counts, malformed spans, unordered bounds and more than
//!   [`SOURCE_BUCKETS_MAX`] buckets are typed errors ([`ConvertError`]); nothing panics.

use std::fmt;

mod cumulative;
mod tables;
pub use cumulative::{Bounded, Cumulative, CumulativeDecodeError, Exponential, Increase};

use crate::bin::{Bin, Parts, BIN_COUNT_MAX};
use crate::histogram::Histogram;

/// The most source buckets (per sign), spans or bounds one conversion accepts.
/// Prometheus and OTel default to 160; schema 8 over llhist's whole range would need ~218,000.
pub const SOURCE_BUCKETS_MAX: usize = 1 << 16;

/// Smallest magnitude llhist holds outside the zero bin, and the magnitude from which on values
/// go to the NaN bin.
const MAGNITUDE_MIN: f64 = 1e-128;
const MAGNITUDE_MAX: f64 = 1e128;

/// A linear split from 0 starts this many binary orders of magnitude below the bucket's upper
/// bound: below it a share of even `u64::MAX` samples rounds to 0, so no bin there gets any.
const LINEAR_START_LOG2: i32 = 70;

/// A bin's computed upper edge within this relative distance below the bucket's upper bound is
/// taken as reaching it (bin edges are products of rounded doubles).
const EDGE_TOLERANCE_REL: f64 = 1e-12;

/// Prometheus schemas: exponential −4..=8, and custom bounds.
pub const NATIVE_SCHEMA_MIN: i32 = -4;
pub const NATIVE_SCHEMA_MAX: i32 = 8;
pub const NATIVE_SCHEMA_CUSTOM: i32 = -53;
/// OTel exponential scales (the data model's range).
pub const OTEL_SCALE_MIN: i32 = -10;
pub const OTEL_SCALE_MAX: i32 = 20;

/// A run of consecutive buckets: `offset` is the index of its first bucket for the first span and
/// the gap after the previous span for the others (Prometheus `BucketSpan`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub offset: i32,
    pub length: u32,
}

/// The counts of a Prometheus native histogram: integer (delta-encoded buckets) or float.
#[derive(Clone, Debug, PartialEq)]
pub enum NativeCounts {
    /// `count_int`, `zero_count_int`, `positive_deltas`, `negative_deltas`: each bucket count is
    /// the previous bucket's plus its delta (the first is absolute), across spans.
    Integer {
        count: u64,
        zero_count: u64,
        positive_deltas: Vec<i64>,
        negative_deltas: Vec<i64>,
    },
    /// `count_float`, `zero_count_float`, `positive_counts`, `negative_counts` (absolute).
    Float {
        count: f64,
        zero_count: f64,
        positive_counts: Vec<f64>,
        negative_counts: Vec<f64>,
    },
}

impl Default for NativeCounts {
    fn default() -> Self {
        NativeCounts::Integer {
            count: 0,
            zero_count: 0,
            positive_deltas: Vec::new(),
            negative_deltas: Vec::new(),
        }
    }
}

/// A Prometheus native histogram (remote write `Histogram`).
///
/// Schema −4..=8: positive bucket index `i` covers `(b^(i−1), b^i]`, `b = 2^(2^−schema)`;
/// negative buckets mirror it. Schema −53: bucket `i` covers `(custom_values[i−1],
/// custom_values[i]]`, the first from −inf, the one past the last value to +inf.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NativeHistogram {
    pub schema: i32,
    /// Half-width of the zero bucket `[−t, t]` (informational: the zero bucket maps to the zero
    /// bin whatever its width).
    pub zero_threshold: f64,
    pub positive_spans: Vec<Span>,
    pub negative_spans: Vec<Span>,
    pub counts: NativeCounts,
    pub sum: f64,
    /// Upper bounds for schema −53 (+inf implied); ignored for other schemas.
    pub custom_values: Vec<f64>,
}

/// One side of an OTel exponential histogram: `bucket_counts[k]` is bucket `offset + k`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExponentialBuckets {
    pub offset: i32,
    pub bucket_counts: Vec<u64>,
}

/// An OTel exponential histogram data point: bucket index `i` covers `(base^i, base^(i+1)]`,
/// `base = 2^(2^−scale)`; negative buckets mirror it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExponentialHistogram {
    pub scale: i32,
    pub count: u64,
    pub sum: Option<f64>,
    pub zero_count: u64,
    /// Informational, as for Prometheus.
    pub zero_threshold: f64,
    pub positive: ExponentialBuckets,
    pub negative: ExponentialBuckets,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// One Prometheus `_bucket{le="…"}` sample: the number of observations ≤ `le` (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CumulativeBucket {
    pub le: f64,
    pub count: f64,
}

/// A classic Prometheus histogram: its `_bucket` samples in any order (the `+Inf` one optional
/// when `count` is given), `_count` and `_sum`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassicHistogram {
    pub buckets: Vec<CumulativeBucket>,
    pub count: Option<f64>,
    pub sum: Option<f64>,
}

/// An OTel explicit-bounds histogram data point: `bucket_counts[i]` (not cumulative) covers
/// `(explicit_bounds[i−1], explicit_bounds[i]]`, the first from −inf, the last to +inf.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExplicitHistogram {
    pub explicit_bounds: Vec<f64>,
    pub bucket_counts: Vec<u64>,
    pub count: u64,
    pub sum: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// The source's own count, in the type it had.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SourceCount {
    Integer(u64),
    Float(f64),
}

/// A converted histogram and the source's exact totals where the source has them (the bins'
/// midpoint-based sum and mean are estimates; these are not).
#[derive(Clone, Debug, PartialEq)]
pub struct Converted {
    pub histogram: Histogram,
    pub count: Option<SourceCount>,
    pub sum: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// Which part of the source an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Positive,
    Negative,
    Zero,
    Count,
    /// Classic or explicit-bound buckets, or custom bounds.
    Buckets,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Positive => "positive buckets",
            Part::Negative => "negative buckets",
            Part::Zero => "zero bucket",
            Part::Count => "count",
            Part::Buckets => "buckets",
        })
    }
}

/// Why a source histogram could not be converted. Each names what was wrong and where.
#[derive(Clone, Debug, PartialEq)]
pub enum ConvertError {
    /// Prometheus schema outside −4..=8 and not −53.
    BadSchema { schema: i32 },
    /// OTel scale outside −10..=20.
    BadScale { scale: i32 },
    /// More buckets, spans or bounds than [`SOURCE_BUCKETS_MAX`].
    TooManyBuckets { part: Part, count: usize },
    /// Span `index` is malformed: a negative gap after the first span, or (custom bounds) a
    /// bucket index outside the bounds.
    BadSpan { part: Part, index: usize },
    /// The spans' lengths add up to `spans_total` but there are `counts` counts.
    SpanLengthMismatch {
        part: Part,
        spans_total: u64,
        counts: usize,
    },
    /// Count `index` is negative, NaN or infinite (for deltas: the count they add up to).
    BadCount {
        part: Part,
        index: usize,
        value: f64,
    },
    /// Delta `index` overflows i64 when added up.
    CountOverflow { part: Part, index: usize },
    /// The source's count is smaller than the sum of its buckets.
    CountBelowBuckets { count: u64, buckets: u64 },
    /// Bound `index` is NaN, infinite where it must be finite, or not above the one before.
    BadBound { index: usize, value: f64 },
    /// Explicit bounds need one more bucket count than bounds (or no bucket counts at all).
    BucketCountMismatch { bounds: usize, counts: usize },
    /// Cumulative (`le`) counts decrease at the bucket with this bound.
    NotCumulative { le: f64 },
    /// Custom-bounds (schema −53) histograms have no negative buckets.
    NegativeWithCustomBounds,
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConvertError::BadSchema { schema } => write!(
                f,
                "native histogram schema {schema} is not supported (must be -4..=8 or -53)"
            ),
            ConvertError::BadScale { scale } => {
                write!(f, "exponential histogram scale {scale} is outside -10..=20")
            }
            ConvertError::TooManyBuckets { part, count } => write!(
                f,
                "{part}: {count} buckets or spans, more than {SOURCE_BUCKETS_MAX}"
            ),
            ConvertError::BadSpan { part, index } => {
                write!(f, "{part}: span {index} is malformed")
            }
            ConvertError::SpanLengthMismatch {
                part,
                spans_total,
                counts,
            } => write!(
                f,
                "{part}: the spans cover {spans_total} buckets but {counts} counts are given"
            ),
            ConvertError::BadCount { part, index, value } => {
                write!(
                    f,
                    "{part}: count {index} is {value} (must be finite and >= 0)"
                )
            }
            ConvertError::CountOverflow { part, index } => {
                write!(f, "{part}: delta {index} overflows the bucket count")
            }
            ConvertError::CountBelowBuckets { count, buckets } => write!(
                f,
                "histogram count {count} is below the {buckets} samples in its buckets"
            ),
            ConvertError::BadBound { index, value } => write!(
                f,
                "bucket bound {index} is {value} (must be finite and above the previous one)"
            ),
            ConvertError::BucketCountMismatch { bounds, counts } => write!(
                f,
                "{bounds} explicit bounds need {} bucket counts, got {counts}",
                bounds + 1
            ),
            ConvertError::NotCumulative { le } => {
                write!(f, "cumulative bucket count decreases at le={le}")
            }
            ConvertError::NegativeWithCustomBounds => {
                write!(
                    f,
                    "custom-bounds histogram (schema -53) has negative buckets"
                )
            }
        }
    }
}

impl std::error::Error for ConvertError {}

// ---------------------------------------------------------------------------------------------
// Public entry points.

/// Converts a Prometheus native histogram (exponential or custom-bounds schema).
pub fn from_native(h: &NativeHistogram) -> Result<Converted, ConvertError> {
    let is_custom = h.schema == NATIVE_SCHEMA_CUSTOM;
    if !is_custom && !(NATIVE_SCHEMA_MIN..=NATIVE_SCHEMA_MAX).contains(&h.schema) {
        return Err(ConvertError::BadSchema { schema: h.schema });
    }
    if is_custom {
        check_bounds(&h.custom_values)?;
    }
    let buckets = native_buckets(h)?;
    let mut sink = Sink::with_capacity(buckets.total_len());
    sink.add(Bin::ZERO, buckets.zero);
    for (side, negative) in [(&buckets.negative, true), (&buckets.positive, false)] {
        for &(index, count) in side {
            if is_custom {
                emit_bounded(&mut sink, &h.custom_values, index, count, (None, None));
            } else {
                split_exponential(&mut sink, h.schema, index, count, negative);
            }
        }
    }
    let count = add_uncounted(&mut sink, buckets.count)?;
    Ok(Converted {
        histogram: sink.finish(),
        count: Some(count),
        sum: Some(h.sum),
        min: None,
        max: None,
    })
}

/// Converts an OTel exponential histogram. `min`/`max`, when given, narrow the buckets they
/// fall in (e.g. all of a bucket's samples at `min` when `min == max`).
pub fn from_exponential(h: &ExponentialHistogram) -> Result<Converted, ConvertError> {
    if !(OTEL_SCALE_MIN..=OTEL_SCALE_MAX).contains(&h.scale) {
        return Err(ConvertError::BadScale { scale: h.scale });
    }
    let n = h.positive.bucket_counts.len() + h.negative.bucket_counts.len();
    if n > SOURCE_BUCKETS_MAX {
        return Err(ConvertError::TooManyBuckets {
            part: Part::Buckets,
            count: n,
        });
    }
    let mut sink = Sink::with_capacity(n + 1);
    sink.add(Bin::ZERO, h.zero_count);
    // Bucket i covers log2 magnitudes (i·step, (i+1)·step]; exact, step is a power of two.
    let step = (-f64::from(h.scale)).exp2();
    for (side, negative) in [(&h.negative, true), (&h.positive, false)] {
        let (lo, hi) = magnitude_range_log2(h.min, h.max, negative);
        for (k, &count) in side.bucket_counts.iter().enumerate() {
            let index = i64::from(side.offset) + k as i64;
            // min == max narrows a bucket to a point, which split_log2 puts in one bin.
            let whole = (index as f64 * step, (index + 1) as f64 * step);
            let (la, lb) = narrow(whole.0, whole.1, lo, hi);
            if (la, lb) == whole {
                split_exponential(&mut sink, h.scale, index + 1, count, negative);
            } else {
                split_log2(&mut sink, la, lb, count, negative);
            }
        }
    }
    add_uncounted(&mut sink, Total::Integer(h.count))?;
    Ok(Converted {
        histogram: sink.finish(),
        count: Some(SourceCount::Integer(h.count)),
        sum: h.sum,
        min: h.min,
        max: h.max,
    })
}

/// Converts an OTel explicit-bounds histogram. `min`/`max`, when given, narrow the buckets they
/// fall in: the infinite first and last buckets become `(min, bounds[0]]` and
/// `(bounds[last], max]`.
pub fn from_explicit(h: &ExplicitHistogram) -> Result<Converted, ConvertError> {
    check_bounds(&h.explicit_bounds)?;
    let (nb, nc) = (h.explicit_bounds.len(), h.bucket_counts.len());
    if nc != 0 && nc != nb + 1 {
        return Err(ConvertError::BucketCountMismatch {
            bounds: nb,
            counts: nc,
        });
    }
    let mut sink = Sink::with_capacity(nc);
    let range = (
        h.min.filter(|m| m.is_finite()),
        h.max.filter(|m| m.is_finite()),
    );
    for (index, &count) in h.bucket_counts.iter().enumerate() {
        emit_bounded(&mut sink, &h.explicit_bounds, index as i64, count, range);
    }
    add_uncounted(&mut sink, Total::Integer(h.count))?;
    Ok(Converted {
        histogram: sink.finish(),
        count: Some(SourceCount::Integer(h.count)),
        sum: h.sum,
        min: h.min,
        max: h.max,
    })
}

/// Converts a classic Prometheus histogram from its cumulative `le` buckets. Bucket counts are
/// the differences of the rounded cumulative counts, so the total is the rounded `+Inf` count.
pub fn from_classic(h: &ClassicHistogram) -> Result<Converted, ConvertError> {
    if h.buckets.len() > SOURCE_BUCKETS_MAX {
        return Err(ConvertError::TooManyBuckets {
            part: Part::Buckets,
            count: h.buckets.len(),
        });
    }
    let (bounds, cumulative) = classic_sorted(h)?;
    let mut sink = Sink::with_capacity(cumulative.len());
    let mut before = 0u64;
    for (index, &cum) in cumulative.iter().enumerate() {
        let after = round_count(cum).max(before);
        emit_bounded(
            &mut sink,
            &bounds,
            index as i64,
            after - before,
            (None, None),
        );
        before = after;
    }
    let count = match h.count {
        Some(c) => Some(check_float_count(Part::Count, 0, c)?),
        None => None,
    };
    if let Some(c) = count {
        add_uncounted(&mut sink, Total::Float(c))?;
    }
    let source_count = count.or(cumulative.last().copied()).map(SourceCount::Float);
    Ok(Converted {
        histogram: sink.finish(),
        count: source_count,
        sum: h.sum,
        min: None,
        max: None,
    })
}

// ---------------------------------------------------------------------------------------------
// Source buckets → (index, integer count).

/// The source's own total, to compare with its buckets.
#[derive(Clone, Copy)]
enum Total {
    Integer(u64),
    Float(f64),
}

/// A native histogram's buckets as absolute integer counts by bucket index.
struct NativeBuckets {
    zero: u64,
    negative: Vec<(i64, u64)>,
    positive: Vec<(i64, u64)>,
    count: Total,
}

impl NativeBuckets {
    fn total_len(&self) -> usize {
        self.negative.len() + self.positive.len() + 1
    }
}

fn native_buckets(h: &NativeHistogram) -> Result<NativeBuckets, ConvertError> {
    let custom = h.schema == NATIVE_SCHEMA_CUSTOM;
    if custom && !h.negative_spans.is_empty() {
        return Err(ConvertError::NegativeWithCustomBounds);
    }
    // Custom bounds have bucket indexes 0..=len (the last one runs to +inf).
    let index_range = custom.then_some((0, h.custom_values.len() as i64));
    let neg = bucket_indexes(&h.negative_spans, Part::Negative, index_range)?;
    let pos = bucket_indexes(&h.positive_spans, Part::Positive, index_range)?;
    match &h.counts {
        NativeCounts::Integer {
            count,
            zero_count,
            positive_deltas,
            negative_deltas,
        } => {
            if custom && !negative_deltas.is_empty() {
                return Err(ConvertError::NegativeWithCustomBounds);
            }
            let negative = zip_deltas(&neg, negative_deltas, Part::Negative)?;
            let positive = zip_deltas(&pos, positive_deltas, Part::Positive)?;
            Ok(NativeBuckets {
                zero: *zero_count,
                negative,
                positive,
                count: Total::Integer(*count),
            })
        }
        NativeCounts::Float {
            count,
            zero_count,
            positive_counts,
            negative_counts,
        } => {
            if custom && !negative_counts.is_empty() {
                return Err(ConvertError::NegativeWithCustomBounds);
            }
            let count = check_float_count(Part::Count, 0, *count)?;
            let mut rounder = Rounder::default();
            let zero = rounder.take(check_float_count(Part::Zero, 0, *zero_count)?);
            let negative = zip_floats(&neg, negative_counts, Part::Negative, &mut rounder)?;
            let positive = zip_floats(&pos, positive_counts, Part::Positive, &mut rounder)?;
            Ok(NativeBuckets {
                zero,
                negative,
                positive,
                count: Total::Float(count),
            })
        }
    }
}

/// The bucket index of every count the spans describe, in order. `index_range` (inclusive)
/// limits indexes for custom bounds.
fn bucket_indexes(
    spans: &[Span],
    part: Part,
    index_range: Option<(i64, i64)>,
) -> Result<Vec<i64>, ConvertError> {
    if spans.len() > SOURCE_BUCKETS_MAX {
        return Err(ConvertError::TooManyBuckets {
            part,
            count: spans.len(),
        });
    }
    let total: u64 = spans.iter().map(|s| u64::from(s.length)).sum();
    if total > SOURCE_BUCKETS_MAX as u64 {
        return Err(ConvertError::TooManyBuckets {
            part,
            count: total as usize,
        });
    }
    let mut indexes = Vec::with_capacity(total as usize);
    let mut next = 0i64;
    for (span_index, span) in spans.iter().enumerate() {
        if span_index > 0 && span.offset < 0 {
            return Err(ConvertError::BadSpan {
                part,
                index: span_index,
            });
        }
        let start = if span_index == 0 {
            i64::from(span.offset)
        } else {
            next + i64::from(span.offset)
        };
        next = start + i64::from(span.length);
        if let Some((lo, hi)) = index_range {
            if span.length > 0 && (start < lo || next - 1 > hi) {
                return Err(ConvertError::BadSpan {
                    part,
                    index: span_index,
                });
            }
        }
        indexes.extend(start..next);
    }
    Ok(indexes)
}

fn check_lengths(indexes: &[i64], counts: usize, part: Part) -> Result<(), ConvertError> {
    if indexes.len() != counts {
        return Err(ConvertError::SpanLengthMismatch {
            part,
            spans_total: indexes.len() as u64,
            counts,
        });
    }
    Ok(())
}

/// Pairs indexes with the absolute counts the deltas add up to.
fn zip_deltas(
    indexes: &[i64],
    deltas: &[i64],
    part: Part,
) -> Result<Vec<(i64, u64)>, ConvertError> {
    check_lengths(indexes, deltas.len(), part)?;
    let mut out = Vec::with_capacity(deltas.len());
    let mut current = 0i64;
    for (index, (&bucket, &delta)) in indexes.iter().zip(deltas).enumerate() {
        current = current
            .checked_add(delta)
            .ok_or(ConvertError::CountOverflow { part, index })?;
        if current < 0 {
            return Err(ConvertError::BadCount {
                part,
                index,
                value: current as f64,
            });
        }
        out.push((bucket, current as u64));
    }
    Ok(out)
}

/// Pairs indexes with float counts rounded cumulatively.
fn zip_floats(
    indexes: &[i64],
    counts: &[f64],
    part: Part,
    rounder: &mut Rounder,
) -> Result<Vec<(i64, u64)>, ConvertError> {
    check_lengths(indexes, counts.len(), part)?;
    let mut out = Vec::with_capacity(counts.len());
    for (index, (&bucket, &count)) in indexes.iter().zip(counts).enumerate() {
        let count = check_float_count(part, index, count)?;
        out.push((bucket, rounder.take(count)));
    }
    Ok(out)
}

fn check_float_count(part: Part, index: usize, value: f64) -> Result<f64, ConvertError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(ConvertError::BadCount { part, index, value })
    }
}

/// `round(x)` (half away from zero) as a count, saturating at `u64::MAX`; 0 for NaN and
/// negative `x`. The same as `x.round() as u64` for every `x`, without the call to libm's
/// `round` (no single instruction rounds half away from zero): the truncation is exact, and so
/// is `x − t` below 2^53, where alone a fraction is left.
#[inline]
fn round_count(x: f64) -> u64 {
    let t = x as u64;
    if x - t as f64 >= 0.5 {
        t.saturating_add(1)
    } else {
        t
    }
}

/// Rounds a sequence of float counts so that the integers emitted so far always add up to the
/// rounded running float total: no drift, however many fractional counts there are.
#[derive(Default)]
struct Rounder {
    running: f64,
    emitted: u64,
}

impl Rounder {
    fn take(&mut self, count: f64) -> u64 {
        self.running += count;
        let target = round_count(self.running).max(self.emitted);
        let out = target - self.emitted;
        self.emitted = target;
        out
    }
}

/// Classic buckets sorted by `le`: the finite bounds, and the cumulative count for each bucket
/// (one per finite bound, plus the `+Inf` one when given or implied by `count`).
fn classic_sorted(h: &ClassicHistogram) -> Result<(Vec<f64>, Vec<f64>), ConvertError> {
    let mut sorted = h.buckets.clone();
    if let Some(index) = sorted
        .iter()
        .position(|b| b.le.is_nan() || b.le == f64::NEG_INFINITY)
    {
        return Err(ConvertError::BadBound {
            index,
            value: sorted[index].le,
        });
    }
    sorted.sort_unstable_by(|a, b| a.le.total_cmp(&b.le));
    let mut bounds = Vec::with_capacity(sorted.len());
    let mut cumulative = Vec::with_capacity(sorted.len() + 1);
    for (index, b) in sorted.iter().enumerate() {
        check_float_count(Part::Buckets, index, b.count)?;
        if index > 0 && sorted[index - 1].le == b.le {
            return Err(ConvertError::BadBound { index, value: b.le });
        }
        if cumulative.last().is_some_and(|&prev| b.count < prev) {
            return Err(ConvertError::NotCumulative { le: b.le });
        }
        if b.le.is_finite() {
            bounds.push(b.le);
        }
        cumulative.push(b.count);
    }
    let has_inf = sorted.last().is_some_and(|b| b.le == f64::INFINITY);
    if let (false, Some(count)) = (has_inf, h.count) {
        let last = cumulative.last().copied().unwrap_or(0.0);
        cumulative.push(count.max(last));
    }
    Ok((bounds, cumulative))
}

/// Bounds must be finite and strictly increasing.
fn check_bounds(bounds: &[f64]) -> Result<(), ConvertError> {
    if bounds.len() > SOURCE_BUCKETS_MAX {
        return Err(ConvertError::TooManyBuckets {
            part: Part::Buckets,
            count: bounds.len(),
        });
    }
    for (index, &value) in bounds.iter().enumerate() {
        let above_previous = index == 0 || value > bounds[index - 1];
        if !value.is_finite() || !above_previous {
            return Err(ConvertError::BadBound { index, value });
        }
    }
    Ok(())
}

/// Samples the source counted but put in no bucket (e.g. NaN observations) go to the NaN bin;
/// a count below its buckets is an error for integer sources.
fn add_uncounted(sink: &mut Sink, total: Total) -> Result<SourceCount, ConvertError> {
    let buckets = u64::try_from(sink.total).unwrap_or(u64::MAX);
    match total {
        Total::Integer(count) => {
            if count < buckets {
                return Err(ConvertError::CountBelowBuckets { count, buckets });
            }
            sink.add(Bin::NAN, count - buckets);
            Ok(SourceCount::Integer(count))
        }
        Total::Float(count) => {
            // Float sources are rates and sums of rates: a count a rounding below its buckets
            // is noise, not an error.
            sink.add(Bin::NAN, round_count(count).saturating_sub(buckets));
            Ok(SourceCount::Float(count))
        }
    }
}

/// log2 of the smallest and largest magnitude on one side that a source's min/max allow: on the
/// positive side `min` bounds from below and `max` from above, on the negative side `max` (the
/// negative value nearest zero) bounds the magnitudes from below and `min` from above.
fn magnitude_range_log2(
    min: Option<f64>,
    max: Option<f64>,
    negative: bool,
) -> (Option<f64>, Option<f64>) {
    let magnitude = |v: Option<f64>| {
        v.filter(|x| x.is_finite() && (*x < 0.0) == negative && *x != 0.0)
            .map(|x| x.abs().log2())
    };
    if negative {
        (magnitude(max), magnitude(min))
    } else {
        (magnitude(min), magnitude(max))
    }
}

/// log2 of the magnitudes bounding native bucket `index`: `(b^(i−1), b^i]`, `b = 2^(2^−schema)`.
/// Exact: the schema's step is a power of two and indexes are far below 2^53.
fn native_log2_bounds(schema: i32, index: i64) -> (f64, f64) {
    let step = (-f64::from(schema)).exp2();
    ((index - 1) as f64 * step, index as f64 * step)
}

// ---------------------------------------------------------------------------------------------
// Splitting one bucket across llhist bins.

/// Accumulates (bin, count) pairs and the exact total put in.
struct Sink {
    pairs: Vec<(u16, u64)>,
    total: u128,
}

impl Sink {
    fn with_capacity(buckets: usize) -> Sink {
        Sink {
            // Narrow buckets overlap one or two bins; wider ones are few.
            pairs: Vec::with_capacity(2 * buckets.min(SOURCE_BUCKETS_MAX) + 2),
            total: 0,
        }
    }

    fn add(&mut self, bin: Bin, count: u64) {
        if count == 0 {
            return;
        }
        self.total += u128::from(count);
        let key = bin.key();
        match self.pairs.last_mut() {
            Some((last, c)) if *last == key => *c = c.saturating_add(count),
            _ => self.pairs.push((key, count)),
        }
    }

    fn finish(mut self) -> Histogram {
        let h = Histogram::from_unsorted_keys(&mut self.pairs);
        debug_assert!(
            self.total > u128::from(u64::MAX) || u128::from(h.sample_count()) == self.total,
            "conversion must keep every sample"
        );
        h
    }
}

/// Hands out a bucket's integer count piece by piece: a piece ending at cumulative share `F`
/// gets `round(c·F) − round(c·F_before)`, and the last piece gets exactly what is left.
struct Pieces {
    count: u64,
    given: u64,
}

impl Pieces {
    fn new(count: u64) -> Pieces {
        Pieces { count, given: 0 }
    }

    /// The piece ending at share `share_after` of the bucket (≥ 1 means the rest).
    fn take(&mut self, share_after: f64) -> u64 {
        let target = if share_after >= 1.0 {
            self.count
        } else {
            // Clamped so rounding noise in the shares can never hand out a negative piece.
            round_count((self.count as f64 * share_after).max(0.0)).clamp(self.given, self.count)
        };
        let piece = target - self.given;
        self.given = target;
        piece
    }
}

/// Splits a bucket whose magnitudes are `(2^la, 2^lb]` in proportion to log-width. Working in
/// log2 keeps OTel scale −10 buckets (bounds up to 2^(1024·i)) finite.
fn split_log2(sink: &mut Sink, la: f64, lb: f64, count: u64, negative: bool) {
    if count == 0 {
        return;
    }
    if la >= lb {
        // Bounds a few ulps apart can share a log2: the bucket is a point.
        let value = lb.exp2();
        return sink.add(Bin::from_f64(if negative { -value } else { value }), count);
    }
    let share_below = |x: f64| ((x.log2() - la) / (lb - la)).clamp(0.0, 1.0);
    split_magnitudes(
        sink,
        la.exp2(),
        lb.exp2(),
        count,
        negative,
        |edge| match edge {
            Edge::Magnitude(x) | Edge::Upper(_, x) => share_below(x),
        },
    );
}

/// Splits base-2 bucket `index` of `scale` (Prometheus schema or OTel scale: magnitudes
/// `(2^((index−1)·2^−scale), 2^(index·2^−scale)]`) as [`split_log2`] does, bit for bit, from
/// tables where the scale has them (`tables`): no `exp2` or `log2` per bucket.
fn split_exponential(sink: &mut Sink, scale: i32, index: i64, count: u64, negative: bool) {
    let (la, lb) = native_log2_bounds(scale, index);
    let bounds = match tables::schema_bounds(scale) {
        Some(b) if la.abs() <= tables::LOG2_RANGE && lb.abs() <= tables::LOG2_RANGE => b,
        _ => return split_log2(sink, la, lb, count, negative),
    };
    if count == 0 {
        return;
    }
    let (lo, hi) = (bounds.bound(index - 1), bounds.bound(index));
    split_magnitudes(sink, lo, hi, count, negative, |edge| {
        let l = match edge {
            Edge::Upper(parts, _) => tables::edge_log2(parts),
            Edge::Magnitude(x) => x.log2(),
        };
        ((l - la) / (lb - la)).clamp(0.0, 1.0)
    });
}

/// Splits a bucket whose magnitudes are `(0, hi]` in proportion to length (a log-width from 0 is
/// infinite; this is also how Prometheus interpolates a bucket starting at 0).
fn split_linear_from_zero(sink: &mut Sink, hi: f64, count: u64, negative: bool) {
    if count == 0 {
        return;
    }
    let lo = hi * (-f64::from(LINEAR_START_LOG2)).exp2();
    split_magnitudes(sink, lo, hi, count, negative, |edge| match edge {
        Edge::Magnitude(x) | Edge::Upper(_, x) => (x / hi).clamp(0.0, 1.0),
    });
}

/// Where `split_magnitudes` asks for a bucket's share below: a magnitude, or a positive
/// regular bin's upper edge (with the bin, so a table can answer for it).
#[derive(Clone, Copy)]
enum Edge {
    Magnitude(f64),
    Upper(Parts, f64),
}

/// Walks the bins overlapping magnitudes `(lo, hi]` in ascending order, giving each the piece of
/// `count` between the bucket's cumulative share at its lower and upper edge; `share_below(e)`
/// is the share of the bucket below edge `e`. Magnitudes below 1e-128 go to the zero bin,
/// those from 1e128 on to the NaN bin. At most `BIN_COUNT_MAX` steps.
fn split_magnitudes(
    sink: &mut Sink,
    lo: f64,
    hi: f64,
    count: u64,
    negative: bool,
    share_below: impl Fn(Edge) -> f64,
) {
    if lo >= MAGNITUDE_MAX {
        return sink.add(Bin::NAN, count);
    }
    if hi <= MAGNITUDE_MIN {
        return sink.add(Bin::ZERO, count);
    }
    let mut pieces = Pieces::new(count);
    let first_regular = Parts {
        negative: false,
        exp: -128,
        val_abs: 10,
    };
    let mut parts = if lo < MAGNITUDE_MIN {
        sink.add(
            Bin::ZERO,
            pieces.take(share_below(Edge::Magnitude(MAGNITUDE_MIN))),
        );
        first_regular
    } else {
        match parts_of(Bin::from_f64(lo)) {
            Some(p) => p,
            // lo rounds up into 1e128: nothing of the bucket is in a regular bin.
            None => return sink.add(Bin::NAN, count),
        }
    };
    let hi_reached = hi * (1.0 - EDGE_TOLERANCE_REL);
    for _ in 0..BIN_COUNT_MAX {
        let bin = Bin::from_parts(parts);
        let upper = bin.upper();
        let last = upper >= hi_reached;
        let piece = pieces.take(if last {
            1.0
        } else {
            share_below(Edge::Upper(parts, upper))
        });
        sink.add(Bin::from_parts(Parts { negative, ..parts }), piece);
        if last {
            return;
        }
        match next_parts(parts) {
            Some(p) => parts = p,
            None => break,
        }
    }
    // Past the largest bin (99, 127): the rest is at or above 1e128.
    sink.add(Bin::NAN, pieces.take(1.0));
}

/// The positive regular bin's parts, `None` for the zero and NaN bins.
fn parts_of(bin: Bin) -> Option<Parts> {
    let val_abs = u32::from(bin.val().unsigned_abs());
    (10..=99).contains(&val_abs).then_some(Parts {
        negative: false,
        exp: i32::from(bin.exp()),
        val_abs,
    })
}

/// The next bin up in magnitude, `None` past (99, 127).
fn next_parts(p: Parts) -> Option<Parts> {
    if p.val_abs < 99 {
        Some(Parts {
            val_abs: p.val_abs + 1,
            ..p
        })
    } else if p.exp < 127 {
        Some(Parts {
            exp: p.exp + 1,
            val_abs: 10,
            ..p
        })
    } else {
        None
    }
}

/// Emits explicit-bound bucket `index` of `bounds` (bucket i covers `(bounds[i−1], bounds[i]]`,
/// the first from −inf, the one past the end to +inf). `(min, max)` are a source's finite
/// min/max, which narrow the buckets they fall in (and so replace infinite bounds).
fn emit_bounded(
    sink: &mut Sink,
    bounds: &[f64],
    index: i64,
    count: u64,
    (min, max): (Option<f64>, Option<f64>),
) {
    if count == 0 {
        return;
    }
    let index = usize::try_from(index).unwrap_or(0).min(bounds.len());
    let lower = index
        .checked_sub(1)
        .map_or(f64::NEG_INFINITY, |i| bounds[i]);
    let upper = bounds.get(index).copied().unwrap_or(f64::INFINITY);
    let (a, b) = narrow(lower, upper, min, max);
    emit_interval(sink, a, b, count);
}

/// `(a, b]` narrowed to `[min, max]` where they fall inside it; a min or max outside the
/// bucket (inconsistent with its count) is ignored rather than trusted.
fn narrow(a: f64, b: f64, min: Option<f64>, max: Option<f64>) -> (f64, f64) {
    let a = match min {
        Some(m) if m > a && m <= b => m,
        _ => a,
    };
    let b = match max {
        Some(m) if m < b && m >= a => m,
        _ => b,
    };
    (a, b)
}

/// Emits `count` samples in `(a, b]`, `a ≤ b`, either bound possibly infinite.
fn emit_interval(sink: &mut Sink, a: f64, b: f64, count: u64) {
    match (a.is_finite(), b.is_finite()) {
        (true, true) if a == b => sink.add(Bin::from_f64(a), count),
        (true, true) => split_interval(sink, a, b, count),
        // Prometheus assumes the lowest bucket starts at 0 when its bound is positive.
        (false, true) if b > 0.0 => split_interval(sink, 0.0, b, count),
        (false, true) => sink.add(Bin::from_f64(b), count),
        // Capped at the last finite bound, as Prometheus's histogram_quantile does.
        (true, false) => sink.add(Bin::from_f64(a), count),
        // Nothing bounds these values: unknown, as histogram_quantile's NaN says.
        (false, false) => sink.add(Bin::NAN, count),
    }
}

/// Splits the finite interval `(a, b]`, `a < b`: log-width when it keeps one sign and avoids 0,
/// else linearly from 0 on each side, sharing the count between the signs by length.
fn split_interval(sink: &mut Sink, a: f64, b: f64, count: u64) {
    debug_assert!(a < b);
    if a > 0.0 {
        split_log2(sink, a.log2(), b.log2(), count, false);
    } else if b < 0.0 {
        split_log2(sink, (-b).log2(), (-a).log2(), count, true);
    } else {
        let negative_share = -a / (b - a);
        let negative = round_count(count as f64 * negative_share).min(count);
        split_linear_from_zero(sink, -a, negative, true);
        split_linear_from_zero(sink, b, count - negative, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bins(h: &Histogram) -> Vec<((i8, i8), u64)> {
        h.bins().map(|(b, c)| ((b.val(), b.exp()), c)).collect()
    }

    #[test]
    fn cumulative_pieces_add_up_and_never_go_negative() {
        let mut c = Pieces::new(10);
        let pieces: Vec<u64> = [0.04, 0.06, 0.5, 0.49, 0.99, 1.0]
            .iter()
            .map(|&s| c.take(s))
            .collect();
        assert_eq!(pieces, vec![0, 1, 4, 0, 5, 0]);
        assert_eq!(pieces.iter().sum::<u64>(), 10);
    }

    #[test]
    fn rounder_keeps_the_running_total() {
        let mut r = Rounder::default();
        let got: Vec<u64> = [0.4; 5].iter().map(|&c| r.take(c)).collect();
        assert_eq!(got, vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn bucket_straddling_1e128_spills_into_the_nan_bin() {
        let mut sink = Sink::with_capacity(1);
        // (2^425, 2^426]: 1e128 ≈ 2^425.2, so about a fifth is below it.
        split_log2(&mut sink, 425.0, 426.0, 1000, false);
        let h = sink.finish();
        assert_eq!(h.sample_count(), 1000);
        let nan = h.nan_count();
        assert!((750..850).contains(&nan), "{nan}");
        assert_eq!(bins(&h).last().map(|b| b.0), Some((99, 127)));
    }

    #[test]
    fn bucket_below_1e128_magnitudes_goes_to_the_zero_bin() {
        let mut sink = Sink::with_capacity(1);
        split_log2(&mut sink, -500.0, -499.0, 7, true);
        assert_eq!(bins(&sink.finish()), vec![((0, 0), 7)]);
    }

    proptest::proptest! {
        /// The truncating rounding is `f64::round` as a count, for every double.
        #[test]
        fn round_count_is_rounding(bits in proptest::prelude::any::<u64>(), small in 0.0f64..1e6) {
            for x in [f64::from_bits(bits), small, small.floor() + 0.5, small.floor() + 0.49999999999999994] {
                proptest::prop_assert_eq!(round_count(x), x.round() as u64, "{}", x);
            }
        }

        /// From the tables, every base-2 bucket of every schema splits into the same bins and
        /// counts as from `exp2` and `log2` (the path before the tables), bit for bit.
        #[test]
        fn tables_split_as_the_direct_path(
            schema in -4i32..=8,
            first in -3_000i64..3_000,
            counts in proptest::collection::vec(0u64..5_000_000, 1..40),
            big in proptest::prelude::any::<u64>(),
            negative in proptest::prelude::any::<bool>(),
        ) {
            let span = 425i64 << schema.max(0);
            let first = first.rem_euclid(2 * span + 60) - span - 30;
            let mut fast = Sink::with_capacity(counts.len() + 1);
            let mut direct = Sink::with_capacity(counts.len() + 1);
            for (k, &count) in counts.iter().chain(std::iter::once(&big)).enumerate() {
                let index = first + k as i64;
                split_exponential(&mut fast, schema, index, count, negative);
                let (la, lb) = native_log2_bounds(schema, index);
                split_log2(&mut direct, la, lb, count, negative);
            }
            proptest::prop_assert_eq!(fast.pairs, direct.pairs);
        }
    }

    /// Every bucket of schemas 0 and 3 across llhist's whole range, with awkward counts.
    #[test]
    fn tables_split_every_bucket_as_the_direct_path() {
        for schema in [0, 3] {
            let span = 430i64 << schema;
            for index in -span..=span {
                for count in [1, 7, 1_000_003, u64::MAX] {
                    let mut fast = Sink::with_capacity(4);
                    let mut direct = Sink::with_capacity(4);
                    split_exponential(&mut fast, schema, index, count, false);
                    let (la, lb) = native_log2_bounds(schema, index);
                    split_log2(&mut direct, la, lb, count, false);
                    assert_eq!(fast.pairs, direct.pairs, "schema {schema} index {index}");
                }
            }
        }
    }
}
