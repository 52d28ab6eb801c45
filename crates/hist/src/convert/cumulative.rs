//! Cumulative histograms in their sender's own buckets, and their increases.
//!
//! A sender that keeps a running total (Prometheus native histograms, OTel cumulative
//! temporality, httptrap `_type: "H"`) must be differenced in *its* bucket space: converting
//! each total to llhist bins first rounds every bucket's log-width split on its own, so a bin's
//! share of a growing bucket can shrink, and that reads as a counter reset. [`Cumulative`] keeps
//! the buckets as sent, [`Cumulative::increase_since`] takes the difference (or says the sender
//! reset its counts, by Prometheus's rules), and only the increase is converted
//! ([`Cumulative::to_histogram`]) — a bucket's count lands exactly, so the total of the stored
//! increases is the sum of the sender's true increases.
//!
//! Reset rules (Prometheus `histogram.DetectReset`): a higher schema (finer buckets), a smaller
//! zero threshold, another bucket layout (custom bounds), another family, or — after bringing
//! the previous total to the current schema and zero threshold — a smaller count, zero count or
//! bucket count.

use std::collections::BTreeMap;

use super::{
    check_bounds, emit_bounded, native_buckets, split_exponential, ConvertError, ExplicitHistogram,
    ExponentialHistogram, NativeHistogram, Part, Sink, Total, NATIVE_SCHEMA_CUSTOM, OTEL_SCALE_MAX,
    OTEL_SCALE_MIN, SOURCE_BUCKETS_MAX,
};
use crate::bin::Bin;
use crate::histogram::Histogram;

/// A cumulative histogram as its sender counts it.
#[derive(Clone, Debug, PartialEq)]
pub enum Cumulative {
    /// llhist bins (httptrap `_type: "H"`).
    Bins(Histogram),
    /// Base-2 exponential buckets: Prometheus native schemas −4..=8 and OTel scales −10..=20.
    Exponential(Exponential),
    /// Buckets with explicit upper bounds: Prometheus custom bounds (schema −53), OTel explicit.
    Bounded(Bounded),
}

/// Exponential buckets in Prometheus's numbering: with `base = 2^(2^−scale)`, positive bucket
/// `i` covers `(base^(i−1), base^i]`, negative bucket `i` the mirror image.
#[derive(Clone, Debug, PartialEq)]
pub struct Exponential {
    /// Prometheus schema, OTel scale: the same number.
    pub scale: i32,
    pub zero_threshold: f64,
    pub zero_count: u64,
    /// Every sample, including those in no bucket (Prometheus counts NaN observations so).
    pub count: u64,
    pub sum: f64,
    /// `(index, count)`, ascending indexes, counts above zero.
    pub positive: Vec<(i32, u64)>,
    pub negative: Vec<(i32, u64)>,
}

/// Buckets with explicit upper bounds: bucket `i` covers `(bounds[i−1], bounds[i]]`, the first
/// from −inf, the last (`bounds.len()`) to +inf.
#[derive(Clone, Debug, PartialEq)]
pub struct Bounded {
    pub bounds: Vec<f64>,
    /// `bounds.len() + 1` counts.
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum: f64,
}

/// What a total says about the interval since the previous one.
#[derive(Clone, Debug, PartialEq)]
pub enum Increase {
    /// The samples added since: the difference, in the same buckets.
    Delta(Cumulative),
    /// The sender reset its counts: everything in the new total was observed since the reset.
    Reset,
}

/// Why encoded bytes are not a [`Cumulative`]: what, and at which byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CumulativeDecodeError {
    pub offset: usize,
    pub what: &'static str,
}

const KIND_BINS: u8 = 1;
const KIND_EXPONENTIAL: u8 = 2;
const KIND_BOUNDED: u8 = 3;

impl Cumulative {
    /// A native histogram as sent (float counts rounded cumulatively, as the conversion does).
    pub fn from_native(h: &NativeHistogram) -> Result<Cumulative, ConvertError> {
        let buckets = native_buckets(h)?;
        let count = match buckets.count {
            Total::Integer(c) => c,
            Total::Float(c) => super::round_count(c),
        };
        let in_buckets = buckets.zero
            + buckets.positive.iter().map(|b| b.1).sum::<u64>()
            + buckets.negative.iter().map(|b| b.1).sum::<u64>();
        if matches!(buckets.count, Total::Integer(_)) && count < in_buckets {
            return Err(ConvertError::CountBelowBuckets {
                count,
                buckets: in_buckets,
            });
        }
        let count = count.max(in_buckets);
        if h.schema == NATIVE_SCHEMA_CUSTOM {
            check_bounds(&h.custom_values)?;
            let mut counts = vec![0u64; h.custom_values.len() + 1];
            for &(index, c) in &buckets.positive {
                // Indexes were checked against the bounds by `native_buckets`.
                if let Some(slot) = usize::try_from(index).ok().and_then(|i| counts.get_mut(i)) {
                    *slot += c;
                }
            }
            return Ok(Cumulative::Bounded(Bounded {
                bounds: h.custom_values.clone(),
                counts,
                count,
                sum: h.sum,
            }));
        }
        if !(super::NATIVE_SCHEMA_MIN..=super::NATIVE_SCHEMA_MAX).contains(&h.schema) {
            return Err(ConvertError::BadSchema { schema: h.schema });
        }
        let side = |v: &[(i64, u64)], part| sparse(v.iter().map(|&(i, c)| (i, c)), part);
        Ok(Cumulative::Exponential(Exponential {
            scale: h.schema,
            zero_threshold: h.zero_threshold,
            zero_count: buckets.zero,
            count,
            sum: h.sum,
            positive: side(&buckets.positive, Part::Positive)?,
            negative: side(&buckets.negative, Part::Negative)?,
        }))
    }

    /// An OTel exponential data point as sent (`min`/`max` are over the whole cumulative
    /// interval, so they narrow nothing in an increase and are dropped).
    pub fn from_exponential(h: &ExponentialHistogram) -> Result<Cumulative, ConvertError> {
        if !(OTEL_SCALE_MIN..=OTEL_SCALE_MAX).contains(&h.scale) {
            return Err(ConvertError::BadScale { scale: h.scale });
        }
        let side = |b: &super::ExponentialBuckets, part| {
            if b.bucket_counts.len() > SOURCE_BUCKETS_MAX {
                return Err(ConvertError::TooManyBuckets {
                    part,
                    count: b.bucket_counts.len(),
                });
            }
            // OTel bucket j covers (base^j, base^(j+1)]: Prometheus's j + 1.
            let first = i64::from(b.offset) + 1;
            sparse(
                b.bucket_counts
                    .iter()
                    .enumerate()
                    .map(|(k, &c)| (first + k as i64, c)),
                part,
            )
        };
        let positive = side(&h.positive, Part::Positive)?;
        let negative = side(&h.negative, Part::Negative)?;
        let in_buckets = h.zero_count
            + positive.iter().map(|b| b.1).sum::<u64>()
            + negative.iter().map(|b| b.1).sum::<u64>();
        if h.count < in_buckets {
            return Err(ConvertError::CountBelowBuckets {
                count: h.count,
                buckets: in_buckets,
            });
        }
        Ok(Cumulative::Exponential(Exponential {
            scale: h.scale,
            zero_threshold: h.zero_threshold,
            zero_count: h.zero_count,
            count: h.count,
            sum: h.sum.unwrap_or(0.0),
            positive,
            negative,
        }))
    }

    /// An OTel explicit-bounds data point as sent.
    pub fn from_explicit(h: &ExplicitHistogram) -> Result<Cumulative, ConvertError> {
        check_bounds(&h.explicit_bounds)?;
        let (nb, nc) = (h.explicit_bounds.len(), h.bucket_counts.len());
        let counts = match nc {
            0 => vec![0; nb + 1],
            n if n == nb + 1 => h.bucket_counts.clone(),
            _ => {
                return Err(ConvertError::BucketCountMismatch {
                    bounds: nb,
                    counts: nc,
                })
            }
        };
        let in_buckets = counts.iter().fold(0u64, |a, &c| a.saturating_add(c));
        if h.count < in_buckets {
            return Err(ConvertError::CountBelowBuckets {
                count: h.count,
                buckets: in_buckets,
            });
        }
        Ok(Cumulative::Bounded(Bounded {
            bounds: h.explicit_bounds.clone(),
            counts,
            count: h.count,
            sum: h.sum.unwrap_or(0.0),
        }))
    }

    /// Samples in the total.
    pub fn count(&self) -> u64 {
        match self {
            Cumulative::Bins(h) => h.sample_count(),
            Cumulative::Exponential(e) => e.count,
            Cumulative::Bounded(b) => b.count,
        }
    }

    /// The samples added since `previous`, or a reset.
    pub fn increase_since(&self, previous: &Cumulative) -> Increase {
        match (self, previous) {
            (Cumulative::Bins(now), Cumulative::Bins(before)) => {
                let mut delta = now.clone();
                if delta.subtract(before) {
                    Increase::Delta(Cumulative::Bins(delta))
                } else {
                    Increase::Reset
                }
            }
            (Cumulative::Exponential(now), Cumulative::Exponential(before)) => {
                match now.increase_since(before) {
                    Some(delta) => Increase::Delta(Cumulative::Exponential(delta)),
                    None => Increase::Reset,
                }
            }
            (Cumulative::Bounded(now), Cumulative::Bounded(before)) => {
                match now.increase_since(before) {
                    Some(delta) => Increase::Delta(Cumulative::Bounded(delta)),
                    None => Increase::Reset,
                }
            }
            _ => Increase::Reset,
        }
    }

    /// The samples as llhist bins: each bucket's count split across the bins it overlaps
    /// (`crate::convert`'s rules), samples counted in no bucket in the NaN bin. Infallible: the
    /// layout was checked when the value was made or decoded, and a count below the buckets'
    /// total (possible in an increase of an odd sender) adds nothing to the NaN bin.
    pub fn to_histogram(&self) -> Histogram {
        match self {
            Cumulative::Bins(h) => h.clone(),
            Cumulative::Exponential(e) => {
                let mut sink = Sink::with_capacity(e.positive.len() + e.negative.len() + 1);
                sink.add(Bin::ZERO, e.zero_count);
                for (side, negative) in [(&e.negative, true), (&e.positive, false)] {
                    for &(index, count) in side {
                        split_exponential(&mut sink, e.scale, i64::from(index), count, negative);
                    }
                }
                add_count(&mut sink, e.count);
                sink.finish()
            }
            Cumulative::Bounded(b) => {
                let mut sink = Sink::with_capacity(b.counts.len());
                for (index, &count) in b.counts.iter().enumerate() {
                    emit_bounded(&mut sink, &b.bounds, index as i64, count, (None, None));
                }
                add_count(&mut sink, b.count);
                sink.finish()
            }
        }
    }

    /// Appends the binary form (`FORMAT.md`, "Cumulative histograms").
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Cumulative::Bins(h) => {
                out.push(KIND_BINS);
                put_varint(out, h.bin_count() as u64);
                crate::packed::pack_histogram(h, out);
            }
            Cumulative::Exponential(e) => {
                out.push(KIND_EXPONENTIAL);
                put_varint(out, zigzag(i64::from(e.scale)));
                out.extend_from_slice(&e.zero_threshold.to_le_bytes());
                put_varint(out, e.zero_count);
                put_varint(out, e.count);
                out.extend_from_slice(&e.sum.to_le_bytes());
                for side in [&e.positive, &e.negative] {
                    put_varint(out, side.len() as u64);
                    let mut previous = 0i64;
                    for &(index, count) in side {
                        put_varint(out, zigzag(i64::from(index) - previous));
                        put_varint(out, count);
                        previous = i64::from(index);
                    }
                }
            }
            Cumulative::Bounded(b) => {
                out.push(KIND_BOUNDED);
                put_varint(out, b.bounds.len() as u64);
                for bound in &b.bounds {
                    out.extend_from_slice(&bound.to_le_bytes());
                }
                for &count in &b.counts {
                    put_varint(out, count);
                }
                put_varint(out, b.count);
                out.extend_from_slice(&b.sum.to_le_bytes());
            }
        }
    }

    /// Reads one binary form from the start of `bytes`; returns it and the bytes used. Checks
    /// everything the constructors check; never panics and never allocates beyond the input.
    pub fn decode_prefix(bytes: &[u8]) -> Result<(Cumulative, usize), CumulativeDecodeError> {
        let mut c = Reader { bytes, pos: 0 };
        let value = match c.byte("cumulative kind")? {
            KIND_BINS => {
                let bins = c.count(crate::BIN_COUNT_MAX, "bin count")?;
                let rest = &bytes[c.pos..];
                let (h, used) = crate::packed::unpack_prefix(rest, bins).map_err(|e| {
                    CumulativeDecodeError {
                        offset: c.pos + e.offset,
                        what: e.what,
                    }
                })?;
                c.pos += used;
                Cumulative::Bins(h)
            }
            KIND_EXPONENTIAL => Cumulative::Exponential(decode_exponential(&mut c)?),
            KIND_BOUNDED => Cumulative::Bounded(decode_bounded(&mut c)?),
            _ => return Err(c.fail("cumulative kind")),
        };
        Ok((value, c.pos))
    }
}

impl Exponential {
    /// `None` for a reset.
    fn increase_since(&self, before: &Exponential) -> Option<Exponential> {
        if self.scale > before.scale || self.zero_threshold < before.zero_threshold {
            return None;
        }
        let before = before.at(self.scale, self.zero_threshold);
        let zero_count = self.zero_count.checked_sub(before.zero_count)?;
        let count = self.count.checked_sub(before.count)?;
        Some(Exponential {
            scale: self.scale,
            zero_threshold: self.zero_threshold,
            zero_count,
            count,
            sum: self.sum - before.sum,
            positive: side_increase(&self.positive, &before.positive)?,
            negative: side_increase(&self.negative, &before.negative)?,
        })
    }

    /// The same samples in the coarser buckets of `scale` (≤ the own) and a zero bucket of
    /// `zero_threshold` (≥ the own): buckets wholly inside the zero bucket join it.
    fn at(&self, scale: i32, zero_threshold: f64) -> Exponential {
        let shift = (self.scale - scale).clamp(0, 63) as u32;
        let mut zero_count = self.zero_count;
        // Bucket i's upper magnitude is 2^(i·2^−scale); it is inside [0, t] when that ≤ t.
        let limit_log2 = if zero_threshold > 0.0 {
            zero_threshold.log2() + 1e-9
        } else {
            f64::NEG_INFINITY
        };
        let step = (-f64::from(scale)).exp2();
        let mut reduce = |side: &[(i32, u64)]| {
            let mut out: BTreeMap<i32, u64> = BTreeMap::new();
            for &(index, count) in side {
                // Prometheus's reduction: bucket i of schema s is ((i − 1) >> d) + 1 of s − d.
                let i = (((i64::from(index) - 1) >> shift) + 1) as i32;
                if f64::from(i) * step <= limit_log2 {
                    zero_count = zero_count.saturating_add(count);
                } else {
                    let slot = out.entry(i).or_insert(0);
                    *slot = slot.saturating_add(count);
                }
            }
            out.into_iter().collect::<Vec<_>>()
        };
        let positive = reduce(&self.positive);
        let negative = reduce(&self.negative);
        Exponential {
            scale,
            zero_threshold,
            zero_count,
            count: self.count,
            sum: self.sum,
            positive,
            negative,
        }
    }
}

impl Bounded {
    /// `None` for a reset (other bounds, or a count went down).
    fn increase_since(&self, before: &Bounded) -> Option<Bounded> {
        let same_bounds = self.bounds.len() == before.bounds.len()
            && self
                .bounds
                .iter()
                .zip(&before.bounds)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if !same_bounds || self.counts.len() != before.counts.len() {
            return None;
        }
        let counts = self
            .counts
            .iter()
            .zip(&before.counts)
            .map(|(now, was)| now.checked_sub(*was))
            .collect::<Option<Vec<u64>>>()?;
        Some(Bounded {
            bounds: self.bounds.clone(),
            counts,
            count: self.count.checked_sub(before.count)?,
            sum: self.sum - before.sum,
        })
    }
}

/// Samples counted beyond the buckets go to the NaN bin.
fn add_count(sink: &mut Sink, count: u64) {
    let in_buckets = u64::try_from(sink.total).unwrap_or(u64::MAX);
    sink.add(Bin::NAN, count.saturating_sub(in_buckets));
}

/// `now − before` bucket by bucket; `None` if any bucket went down (or vanished).
fn side_increase(now: &[(i32, u64)], before: &[(i32, u64)]) -> Option<Vec<(i32, u64)>> {
    let mut out = Vec::with_capacity(now.len());
    let mut b = before.iter().peekable();
    for &(index, count) in now {
        let mut was = 0;
        while let Some(&&(bi, bc)) = b.peek() {
            if bi < index {
                if bc > 0 {
                    return None;
                }
                b.next();
            } else {
                if bi == index {
                    was = bc;
                    b.next();
                }
                break;
            }
        }
        let delta = count.checked_sub(was)?;
        if delta > 0 {
            out.push((index, delta));
        }
    }
    if b.any(|&(_, c)| c > 0) {
        return None;
    }
    Some(out)
}

/// `(index, count)` pairs as a sorted side without zero counts; indexes must fit i32.
fn sparse(
    pairs: impl Iterator<Item = (i64, u64)>,
    part: Part,
) -> Result<Vec<(i32, u64)>, ConvertError> {
    let mut out: Vec<(i32, u64)> = Vec::new();
    for (n, (index, count)) in pairs.enumerate() {
        if count == 0 {
            continue;
        }
        let index = i32::try_from(index).map_err(|_| ConvertError::BadSpan { part, index: n })?;
        if out.last().is_some_and(|&(last, _)| last >= index) {
            return Err(ConvertError::BadSpan { part, index: n });
        }
        out.push((index, count));
    }
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn fail(&self, what: &'static str) -> CumulativeDecodeError {
        CumulativeDecodeError {
            offset: self.pos,
            what,
        }
    }

    fn byte(&mut self, what: &'static str) -> Result<u8, CumulativeDecodeError> {
        let b = *self.bytes.get(self.pos).ok_or_else(|| self.fail(what))?;
        self.pos += 1;
        Ok(b)
    }

    fn f64(&mut self, what: &'static str) -> Result<f64, CumulativeDecodeError> {
        let raw = self
            .bytes
            .get(self.pos..self.pos + 8)
            .ok_or_else(|| self.fail(what))?;
        let mut b = [0u8; 8];
        b.copy_from_slice(raw);
        self.pos += 8;
        Ok(f64::from_le_bytes(b))
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, CumulativeDecodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte(what)?;
            if i == 9 && b > 1 {
                return Err(self.fail(what));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.fail(what))
    }

    /// A length: at most `max` and at most the bytes left (every item takes one at least).
    fn count(&mut self, max: usize, what: &'static str) -> Result<usize, CumulativeDecodeError> {
        let v = self.varint(what)?;
        let left = (self.bytes.len() - self.pos) as u64;
        if v > max as u64 || v > left {
            return Err(self.fail(what));
        }
        Ok(v as usize)
    }
}

fn decode_exponential(c: &mut Reader<'_>) -> Result<Exponential, CumulativeDecodeError> {
    let scale = unzigzag(c.varint("scale")?);
    if !(i64::from(OTEL_SCALE_MIN)..=i64::from(OTEL_SCALE_MAX)).contains(&scale) {
        return Err(c.fail("scale"));
    }
    let zero_threshold = c.f64("zero threshold")?;
    let zero_count = c.varint("zero count")?;
    let count = c.varint("count")?;
    let sum = c.f64("sum")?;
    let mut sides = [Vec::new(), Vec::new()];
    for side in &mut sides {
        let n = c.count(SOURCE_BUCKETS_MAX, "bucket count")?;
        side.reserve(n);
        let mut previous = 0i64;
        for k in 0..n {
            let index = previous + unzigzag(c.varint("bucket index")?);
            let index = i32::try_from(index).map_err(|_| c.fail("bucket index"))?;
            if k > 0 && i64::from(index) <= previous {
                return Err(c.fail("bucket indexes not ascending"));
            }
            let bucket_count = c.varint("bucket count")?;
            if bucket_count == 0 {
                return Err(c.fail("zero bucket count"));
            }
            side.push((index, bucket_count));
            previous = i64::from(index);
        }
    }
    let [positive, negative] = sides;
    Ok(Exponential {
        scale: scale as i32,
        zero_threshold,
        zero_count,
        count,
        sum,
        positive,
        negative,
    })
}

fn decode_bounded(c: &mut Reader<'_>) -> Result<Bounded, CumulativeDecodeError> {
    let n = c.count(SOURCE_BUCKETS_MAX, "bound count")?;
    let mut bounds = Vec::with_capacity(n);
    for _ in 0..n {
        bounds.push(c.f64("bound")?);
    }
    if check_bounds(&bounds).is_err() {
        return Err(c.fail("bounds not finite and ascending"));
    }
    let mut counts = Vec::with_capacity(n + 1);
    for _ in 0..=n {
        counts.push(c.varint("bucket count")?);
    }
    Ok(Bounded {
        bounds,
        counts,
        count: c.varint("count")?,
        sum: c.f64("sum")?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::{NativeCounts, Span};
    use super::*;

    fn native(schema: i32, first: i32, counts: &[i64], zero: u64) -> NativeHistogram {
        // Delta-encode absolute counts.
        let mut deltas = Vec::new();
        let mut previous = 0;
        for &c in counts {
            deltas.push(c - previous);
            previous = c;
        }
        let total: i64 = counts.iter().sum::<i64>() + zero as i64;
        NativeHistogram {
            schema,
            zero_threshold: 1e-128,
            positive_spans: vec![Span {
                offset: first,
                length: counts.len() as u32,
            }],
            negative_spans: vec![],
            counts: NativeCounts::Integer {
                count: total as u64,
                zero_count: zero,
                positive_deltas: deltas,
                negative_deltas: vec![],
            },
            sum: total as f64,
            custom_values: vec![],
        }
    }

    /// One bucket counted 1, 2, 3, 4 by a sender: four samples, never a reset. Converting each
    /// total first made a bin's share shrink and counted 10.
    #[test]
    fn a_growing_bucket_adds_exactly_its_increase() {
        let mut previous: Option<Cumulative> = None;
        let mut total = Histogram::new();
        for n in 1..=4 {
            let now = Cumulative::from_native(&native(0, 3, &[n], 0)).unwrap();
            let increase = match &previous {
                None => now.clone(),
                Some(p) => match now.increase_since(p) {
                    Increase::Delta(d) => d,
                    Increase::Reset => panic!("no reset at {n}"),
                },
            };
            total.merge(&increase.to_histogram());
            previous = Some(now);
        }
        assert_eq!(total.sample_count(), 4);
    }

    #[test]
    fn prometheus_reset_rules() {
        let base = Cumulative::from_native(&native(2, 1, &[5, 7, 1], 2)).unwrap();
        // A bucket goes down.
        let down = Cumulative::from_native(&native(2, 1, &[5, 6, 1], 2)).unwrap();
        assert_eq!(down.increase_since(&base), Increase::Reset);
        // A bucket vanishes.
        let gone = Cumulative::from_native(&native(2, 1, &[5, 7], 2)).unwrap();
        assert_eq!(gone.increase_since(&base), Increase::Reset);
        // The zero bucket goes down.
        let zero = Cumulative::from_native(&native(2, 1, &[5, 7, 1], 1)).unwrap();
        assert_eq!(zero.increase_since(&base), Increase::Reset);
        // A finer schema.
        let finer = Cumulative::from_native(&native(3, 1, &[5, 7, 1], 2)).unwrap();
        assert_eq!(finer.increase_since(&base), Increase::Reset);
        // A smaller zero threshold.
        let mut small = native(2, 1, &[5, 7, 1], 2);
        small.zero_threshold = 1e-200;
        let small = Cumulative::from_native(&small).unwrap();
        assert_eq!(small.increase_since(&base), Increase::Reset);
        // Another family.
        let bins = Cumulative::Bins(Histogram::new());
        assert_eq!(bins.increase_since(&base), Increase::Reset);
        // Growth everywhere is an increase.
        let grown = Cumulative::from_native(&native(2, 0, &[1, 5, 9, 1], 3)).unwrap();
        let Increase::Delta(Cumulative::Exponential(d)) = grown.increase_since(&base) else {
            panic!("expected an increase");
        };
        assert_eq!(d.positive, vec![(0, 1), (2, 2)]);
        assert_eq!(d.zero_count, 1);
        assert_eq!(d.count, 4);
    }

    /// A sender that lowers its resolution (client_golang does when buckets grow too many):
    /// the previous total is brought to the coarser schema, not taken as a reset.
    #[test]
    fn a_coarser_schema_is_compared_in_its_buckets() {
        // Schema 1 buckets 1..=4 merge pairwise into schema 0 buckets 1 and 2.
        let before = Cumulative::from_native(&native(1, 1, &[1, 2, 3, 4], 0)).unwrap();
        let after = Cumulative::from_native(&native(0, 1, &[4, 9], 0)).unwrap();
        let Increase::Delta(Cumulative::Exponential(d)) = after.increase_since(&before) else {
            panic!("expected an increase");
        };
        assert_eq!(d.positive, vec![(1, 1), (2, 2)]);
        assert_eq!(d.count, 3);
    }

    #[test]
    fn a_wider_zero_bucket_takes_the_buckets_inside_it() {
        // Schema 0: bucket 0 is (0.5, 1], bucket 1 is (1, 2]. A zero threshold of 1 takes bucket 0.
        let before = Cumulative::from_native(&native(0, 0, &[3, 4], 1)).unwrap();
        let mut wider = native(0, 1, &[5], 5);
        wider.zero_threshold = 1.0;
        let after = Cumulative::from_native(&wider).unwrap();
        let Increase::Delta(Cumulative::Exponential(d)) = after.increase_since(&before) else {
            panic!("expected an increase");
        };
        assert_eq!(d.zero_count, 1);
        assert_eq!(d.positive, vec![(1, 1)]);
    }

    #[test]
    fn otel_and_explicit_sources_difference_in_their_buckets() {
        let exp = |counts: Vec<u64>| {
            Cumulative::from_exponential(&ExponentialHistogram {
                scale: 3,
                count: counts.iter().sum(),
                positive: super::super::ExponentialBuckets {
                    offset: -2,
                    bucket_counts: counts,
                },
                ..ExponentialHistogram::default()
            })
            .unwrap()
        };
        let Increase::Delta(d) = exp(vec![1, 0, 4]).increase_since(&exp(vec![1, 0, 2])) else {
            panic!("expected an increase");
        };
        // OTel bucket -2 + 2 = 0 is Prometheus bucket 1.
        let Cumulative::Exponential(e) = &d else {
            panic!("exponential")
        };
        assert_eq!(e.positive, vec![(1, 2)]);
        assert_eq!(d.to_histogram().sample_count(), 2);

        let explicit = |counts: Vec<u64>| {
            Cumulative::from_explicit(&ExplicitHistogram {
                explicit_bounds: vec![0.1, 1.0],
                count: counts.iter().sum(),
                bucket_counts: counts,
                ..ExplicitHistogram::default()
            })
            .unwrap()
        };
        let Increase::Delta(d) = explicit(vec![2, 5, 1]).increase_since(&explicit(vec![2, 3, 0]))
        else {
            panic!("expected an increase");
        };
        assert_eq!(d.count(), 3);
        assert_eq!(d.to_histogram().sample_count(), 3);
        assert_eq!(
            explicit(vec![1, 5, 1]).increase_since(&explicit(vec![2, 3, 0])),
            Increase::Reset
        );
    }

    #[test]
    fn the_binary_form_round_trips_and_refuses_damage() {
        let mut h = Histogram::new();
        h.insert_n(1.5, 3);
        let mut with_negative = native(4, -3, &[2, 0, 7], 1);
        with_negative.negative_spans = vec![Span {
            offset: 2,
            length: 1,
        }];
        if let NativeCounts::Integer {
            negative_deltas,
            count,
            ..
        } = &mut with_negative.counts
        {
            negative_deltas.push(6);
            *count += 6;
        }
        let values = [
            Cumulative::Bins(h),
            Cumulative::from_native(&with_negative).unwrap(),
            Cumulative::from_explicit(&ExplicitHistogram {
                explicit_bounds: vec![-1.0, 0.25, 8.0],
                bucket_counts: vec![0, 1, 2, 3],
                count: 7,
                sum: Some(12.5),
                ..ExplicitHistogram::default()
            })
            .unwrap(),
        ];
        for v in values {
            let mut out = vec![];
            v.encode_into(&mut out);
            out.push(0xee);
            let (back, used) = Cumulative::decode_prefix(&out).unwrap();
            assert_eq!(back, v);
            assert_eq!(used, out.len() - 1);
            for cut in 0..used {
                assert!(Cumulative::decode_prefix(&out[..cut]).is_err(), "cut {cut}");
            }
            for i in 0..used {
                let mut damaged = out.clone();
                damaged[i] ^= 0x55;
                let _ = Cumulative::decode_prefix(&damaged);
            }
        }
    }
}
