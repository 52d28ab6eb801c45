//! The checks the fuzz targets run on every input. Shared by the libFuzzer targets in
//! `crates/hist/fuzz/fuzz_targets/` (through `#[path]`) and by `tests/fuzz_corpus.rs`, which
//! replays the checked-in corpora on stable Rust in every `cargo test`.
//!
//! Each check hands one input to a decoder, parser or conversion. On success it asserts the
//! histogram's invariants, that it survives a round trip through every form (binary, base64,
//! both text forms, the JSON map) and that it agrees with a slow, obviously-correct model of the
//! format; on failure, that the error is the one the model predicts. A panic anywhere is a bug.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use arbitrary::{Result as ArbResult, Unstructured};
use hist::convert::{
    from_classic, from_explicit, from_exponential, from_native, ClassicHistogram, Converted,
    CumulativeBucket, ExplicitHistogram, ExponentialBuckets, ExponentialHistogram, NativeCounts,
    NativeHistogram, SourceCount, Span,
};
use hist::{Bin, DecodeError, Histogram, QuantileType};

/// A fuzz target's check: any bytes in, a panic on a bug.
pub type Check = fn(&[u8]);

/// Every fuzz target: its corpus directory name and its check.
pub const TARGETS: [(&str, Check); 4] = [
    ("decode_binary", decode_binary),
    ("decode_base64", decode_base64),
    ("parse_text", parse_text),
    ("convert", convert),
];

// ---------------------------------------------------------------------------------------------
// decode_binary: `Histogram::decode` and `Histogram::decode_prefix` on raw bytes.

/// Decodes `data` as the binary form, whole and as a prefix, and compares both with the model.
pub fn decode_binary(data: &[u8]) {
    let model = model_decode(data);
    let prefix = Histogram::decode_prefix(data);
    match (&prefix, &model) {
        (Ok((h, used)), Ok((bins, model_used))) => {
            assert_eq!(used, model_used, "bytes used");
            assert_eq!(&bins_of(h), bins, "decoded bins");
            // The bins a prefix holds cannot outnumber the 4-byte records that fit in the input.
            assert!(h.bin_count() <= data.len().saturating_sub(2) / 4);
            check_histogram(h);
        }
        (Err(e), Err(m)) => {
            assert_eq!(e, m, "decode error");
            assert!(!e.to_string().is_empty());
        }
        _ => panic!("decode_prefix gave {prefix:?}, the model {model:?}"),
    }
    let whole = Histogram::decode(data);
    match prefix {
        Ok((h, used)) if used == data.len() => assert_eq!(whole, Ok(h)),
        Ok((_, used)) => assert_eq!(
            whole,
            Err(DecodeError::TrailingBytes {
                offset: used,
                len: data.len()
            })
        ),
        Err(e) => assert_eq!(whole, Err(e)),
    }
}

/// The binary form read the slow, obvious way (FORMAT.md, "Binary form"): every length checked
/// before it is used, bins gathered in an ordered map, invalid and count-0 bins dropped,
/// repeated bins added with saturation.
fn model_decode(data: &[u8]) -> Result<(Vec<(Bin, u64)>, usize), DecodeError> {
    let truncated = |offset: usize, needed: usize| DecodeError::Truncated {
        offset,
        needed,
        available: data.len() - offset,
    };
    if data.len() < 2 {
        return Err(truncated(0, 2));
    }
    let nbins = u16::from_be_bytes([data[0], data[1]]);
    let mut bins: BTreeMap<Bin, u64> = BTreeMap::new();
    let mut pos = 2;
    for _ in 0..nbins {
        let available = data.len() - pos;
        if available < 3 {
            return Err(truncated(pos, 3));
        }
        let width = data[pos + 2];
        if width > 7 {
            return Err(DecodeError::BadCountWidth {
                offset: pos + 2,
                width,
            });
        }
        let len = usize::from(width) + 1;
        if available < 3 + len {
            return Err(truncated(pos, 3 + len));
        }
        let count = data[pos + 3..pos + 3 + len]
            .iter()
            .rev()
            .fold(0u64, |acc, &b| acc << 8 | u64::from(b));
        if let Some(bin) = Bin::new(data[pos] as i8, data[pos + 1] as i8) {
            if count > 0 {
                let slot = bins.entry(bin).or_insert(0);
                *slot = slot.saturating_add(count);
            }
        }
        pos += 3 + len;
    }
    Ok((bins.into_iter().collect(), pos))
}

// ---------------------------------------------------------------------------------------------
// decode_base64: `Histogram::from_base64` on any UTF-8 text.

/// Decodes `data` (when it is UTF-8) as base64 and compares with the model.
pub fn decode_base64(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let result = Histogram::from_base64(text);
    // The decoder into kept buffers, whose buffers hold another histogram before: the same
    // bins or the same error.
    let (mut bytes, mut keys, mut counts) = (vec![7u8; 9], vec![3u16, 1, 2], vec![0u64, 5]);
    let into = Histogram::decode_base64_into(text.as_bytes(), &mut bytes, &mut keys, &mut counts)
        .map(|()| Histogram::from_sorted_keys(&keys, &counts));
    assert_eq!(into, result, "decode_base64_into against from_base64");
    if let Ok(h) = &into {
        assert_eq!(h.keys(), keys.as_slice());
        check_histogram(h);
    }
    match (&result, model_base64(text)) {
        (Ok(h), Some(bytes)) => {
            assert_eq!(Histogram::decode(&bytes).as_ref(), Ok(h));
            check_histogram(h);
        }
        (Err(DecodeError::Base64 { position }), None) => {
            assert!(
                *position <= text.len(),
                "error position {position} past the end"
            );
        }
        (Err(e), Some(bytes)) => {
            assert!(
                !matches!(e, DecodeError::Base64 { .. }),
                "valid base64 rejected"
            );
            assert_eq!(Histogram::decode(&bytes).as_ref(), Err(e));
        }
        (_, None) => panic!("invalid base64 gave {result:?}"),
    }
}

/// Base64 as FORMAT.md specifies it, the slow way: ASCII whitespace skipped; standard alphabet;
/// `=` padding optional but, when present, exactly what completes the last quantum; the unused
/// low bits of the last character zero (canonical encoding).
fn model_base64(text: &str) -> Option<Vec<u8>> {
    let chars: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let body_len = chars.iter().rposition(|&c| c != b'=').map_or(0, |i| i + 1);
    let (body, padding) = chars.split_at(body_len);
    if !padding.is_empty()
        && (!chars.len().is_multiple_of(4) || padding.len() != (4 - body_len % 4) % 4)
    {
        return None;
    }
    if body_len % 4 == 1 {
        return None;
    }
    let sextet = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(body_len / 4 * 3 + 2);
    for quantum in body.chunks(4) {
        let mut bits = 0u32;
        for &c in quantum {
            bits = bits << 6 | sextet(c)?;
        }
        let bytes = quantum.len() * 6 / 8;
        let spare = quantum.len() * 6 - bytes * 8;
        if bits & ((1 << spare) - 1) != 0 {
            return None;
        }
        let bits = bits >> spare;
        out.extend((0..bytes).rev().map(|i| (bits >> (8 * i)) as u8));
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------------
// parse_text: `parse_entry`, `Histogram::from_text_entries` and `Histogram::from_json_map`.

/// Parses `data` (when it is UTF-8) line by line as text entries, and whole as the JSON map.
pub fn parse_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines: Vec<&str> = text.split('\n').collect();
    let mut model = Ok(Vec::new());
    for line in &lines {
        match hist::parse_entry(line) {
            Ok((bin, count)) => {
                check_entry(bin, count);
                if let Ok(pairs) = &mut model {
                    pairs.push((bin, count));
                }
            }
            Err(e) => {
                assert!(e.position <= line.len(), "{e} in {line:?}");
                if model.is_ok() {
                    model = Err(e);
                }
            }
        }
    }
    let parsed = Histogram::from_text_entries(lines.iter().copied());
    match (parsed, model) {
        (Ok(h), Ok(pairs)) => {
            assert_eq!(h, Histogram::from_bins(pairs));
            check_histogram(&h);
        }
        (Err(e), Err(first)) => assert_eq!(e, first),
        (parsed, model) => panic!("from_text_entries gave {parsed:?}, the entries {model:?}"),
    }
    match Histogram::from_json_map(text) {
        Ok(h) => check_histogram(&h),
        Err(e) => assert!(e.position <= text.len(), "{e}"),
    }
}

/// A parsed entry's bin and count come back from both emitted entry forms.
fn check_entry(bin: Bin, count: u64) {
    let go = format!("H[{}]={count}", bin.edge_text());
    assert_eq!(hist::parse_entry(&go), Ok((bin, count)), "{go}");
    let c = format!("{}={count}", bin.c_text());
    assert_eq!(hist::parse_entry(&c), Ok((bin, count)), "{c}");
}

// ---------------------------------------------------------------------------------------------
// convert: `hist::convert::*` on structured sources built from the bytes.

/// Most items in any generated list: sources stay small, so each run is fast.
const ITEMS_MAX: usize = 24;

/// The largest converted histogram whose text forms are round-tripped.
const TEXT_CHECK_BINS_MAX: usize = 2_000;

/// A source histogram of one of the families `hist::convert` accepts.
#[derive(Debug)]
pub enum Source {
    Native(NativeHistogram),
    Exponential(ExponentialHistogram),
    Explicit(ExplicitHistogram),
    Classic(ClassicHistogram),
}

/// The source histogram `convert` builds from `data` (`None` if the bytes run out first), for
/// reading a failing input.
pub fn convert_source(data: &[u8]) -> Option<Source> {
    let mut u = Unstructured::new(data);
    Some(match u.int_in_range(0u8..=3).ok()? {
        0 => Source::Native(native(&mut u).ok()?),
        1 => Source::Exponential(exponential(&mut u).ok()?),
        2 => Source::Explicit(explicit(&mut u).ok()?),
        _ => Source::Classic(classic(&mut u).ok()?),
    })
}

/// Builds one source histogram of any family from `data` and converts it.
pub fn convert(data: &[u8]) {
    match convert_source(data) {
        Some(Source::Native(h)) => check_native(&h),
        Some(Source::Exponential(h)) => check_exponential(&h),
        Some(Source::Explicit(h)) => check_explicit(&h),
        Some(Source::Classic(h)) => check_classic(&h),
        None => {}
    }
}

/// The checks every successful conversion passes, and the error must say something.
fn check_converted<E: std::fmt::Display>(result: Result<Converted, E>) -> Option<Converted> {
    match result {
        Ok(c) => {
            // A bucket spanning many decades converts to thousands of bins (up to 46,082), whose
            // text forms would dominate the run time; the decoding targets cover the text forms
            // of every bin, so here they are checked only for histograms of modest size.
            check_binary_forms(&c.histogram);
            if c.histogram.bin_count() <= TEXT_CHECK_BINS_MAX {
                check_text_forms(&c.histogram);
            }
            exercise(&c.histogram);
            Some(c)
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            None
        }
    }
}

fn check_native(h: &NativeHistogram) {
    let Some(c) = check_converted(from_native(h)) else {
        return;
    };
    assert_eq!(c.sum.map(f64::to_bits), Some(h.sum.to_bits()));
    match &h.counts {
        // Integer sources: every sample lands, uncounted ones in the NaN bin, so the converted
        // histogram holds exactly the source's count.
        NativeCounts::Integer { count, .. } => {
            assert_eq!(c.count, Some(SourceCount::Integer(*count)));
            assert_eq!(c.histogram.sample_count(), *count, "{h:?}");
        }
        // Float sources: the buckets are rounded cumulatively (zero, negative, positive), so
        // they add up to the rounded float total; a larger source count tops up the NaN bin.
        NativeCounts::Float {
            count,
            zero_count,
            positive_counts,
            negative_counts,
        } => {
            assert_eq!(c.count.map(float_count_bits), Some(count.to_bits()));
            let buckets = negative_counts
                .iter()
                .chain(positive_counts)
                .fold(*zero_count, |total, &x| total + x);
            let expected = round_count(*count).max(round_count(buckets));
            assert_eq!(c.histogram.sample_count(), expected, "{h:?}");
        }
    }
}

fn check_exponential(h: &ExponentialHistogram) {
    let Some(c) = check_converted(from_exponential(h)) else {
        return;
    };
    assert_eq!(c.count, Some(SourceCount::Integer(h.count)));
    assert_eq!(c.histogram.sample_count(), h.count, "{h:?}");
    assert_eq!(c.sum.map(f64::to_bits), h.sum.map(f64::to_bits));
    assert_eq!(c.min.map(f64::to_bits), h.min.map(f64::to_bits));
    assert_eq!(c.max.map(f64::to_bits), h.max.map(f64::to_bits));
}

fn check_explicit(h: &ExplicitHistogram) {
    let Some(c) = check_converted(from_explicit(h)) else {
        return;
    };
    assert_eq!(c.count, Some(SourceCount::Integer(h.count)));
    assert_eq!(c.histogram.sample_count(), h.count, "{h:?}");
    assert_eq!(c.sum.map(f64::to_bits), h.sum.map(f64::to_bits));
    assert_eq!(c.min.map(f64::to_bits), h.min.map(f64::to_bits));
    assert_eq!(c.max.map(f64::to_bits), h.max.map(f64::to_bits));
}

fn check_classic(h: &ClassicHistogram) {
    let Some(c) = check_converted(from_classic(h)) else {
        return;
    };
    // Cumulative counts never decrease (else NotCumulative), so the largest is the `+Inf` one.
    let top = h.buckets.iter().map(|b| b.count).reduce(f64::max);
    let source = h.count.or(top);
    assert_eq!(
        c.count.map(float_count_bits),
        source.map(f64::to_bits),
        "{h:?}"
    );
    // The buckets hold the rounded top cumulative count; a larger `_count` tops up the NaN bin.
    let expected = round_count(h.count.unwrap_or(0.0)).max(round_count(top.unwrap_or(0.0)));
    assert_eq!(c.histogram.sample_count(), expected, "{h:?}");
    assert_eq!(c.sum.map(f64::to_bits), h.sum.map(f64::to_bits));
}

/// The bits of a float source count (a float source never reports an integer count).
fn float_count_bits(count: SourceCount) -> u64 {
    match count {
        SourceCount::Float(x) => x.to_bits(),
        SourceCount::Integer(n) => panic!("float source reported integer count {n}"),
    }
}

/// A finite, non-negative float count rounded to an integer count, saturating.
fn round_count(x: f64) -> u64 {
    x.round() as u64
}

fn native(u: &mut Unstructured) -> ArbResult<NativeHistogram> {
    let schema = match u.int_in_range(0u8..=15)? {
        0 => u.arbitrary()?,
        1..=4 => -53,
        _ => u.int_in_range(-4..=8)?,
    };
    let custom_values = if schema == -53 {
        bounds(u)?
    } else {
        Vec::new()
    };
    let positive_spans = spans(u)?;
    let negative_spans = if schema == -53 && u.ratio(7, 8)? {
        Vec::new()
    } else {
        spans(u)?
    };
    let (pos_len, neg_len) = (
        spans_len(u, &positive_spans)?,
        spans_len(u, &negative_spans)?,
    );
    let counts = if u.arbitrary()? {
        let positive_deltas = deltas(u, pos_len)?;
        let negative_deltas = deltas(u, neg_len)?;
        let zero_count = small_count(u)?;
        let buckets = delta_total(&positive_deltas) + delta_total(&negative_deltas);
        let count = match u.int_in_range(0u8..=7)? {
            0 => u.arbitrary()?,
            _ => u64::try_from(buckets.max(0) + i128::from(zero_count) + i128::from(extra(u)?))
                .unwrap_or(u64::MAX),
        };
        NativeCounts::Integer {
            count,
            zero_count,
            positive_deltas,
            negative_deltas,
        }
    } else {
        let positive_counts = list(u, pos_len, float_count)?;
        let negative_counts = list(u, neg_len, float_count)?;
        let zero_count = float_count(u)?;
        let count = if u.ratio(1, 4)? {
            float_count(u)?
        } else {
            positive_counts.iter().chain(&negative_counts).sum::<f64>() + zero_count
        };
        NativeCounts::Float {
            count,
            zero_count,
            positive_counts,
            negative_counts,
        }
    };
    Ok(NativeHistogram {
        schema,
        zero_threshold: float(u)?,
        positive_spans,
        negative_spans,
        counts,
        sum: float(u)?,
        custom_values,
    })
}

fn exponential(u: &mut Unstructured) -> ArbResult<ExponentialHistogram> {
    let scale = if u.ratio(1, 16)? {
        u.arbitrary()?
    } else {
        u.int_in_range(-10..=20)?
    };
    let positive = ExponentialBuckets {
        offset: offset(u)?,
        bucket_counts: list(u, None, count)?,
    };
    let negative = ExponentialBuckets {
        offset: offset(u)?,
        bucket_counts: list(u, None, count)?,
    };
    let zero_count = count(u)?;
    Ok(ExponentialHistogram {
        scale,
        count: total(
            u,
            &[&positive.bucket_counts, &negative.bucket_counts],
            zero_count,
        )?,
        sum: optional(u, float)?,
        zero_count,
        zero_threshold: float(u)?,
        positive,
        negative,
        min: optional(u, float)?,
        max: optional(u, float)?,
    })
}

fn explicit(u: &mut Unstructured) -> ArbResult<ExplicitHistogram> {
    let explicit_bounds = bounds(u)?;
    let n = if u.ratio(15, 16)? {
        explicit_bounds.len() + 1
    } else {
        u.int_in_range(0..=ITEMS_MAX)?
    };
    let bucket_counts = list(u, Some(n), count)?;
    Ok(ExplicitHistogram {
        count: total(u, &[&bucket_counts], 0)?,
        explicit_bounds,
        bucket_counts,
        sum: optional(u, float)?,
        min: optional(u, float)?,
        max: optional(u, float)?,
    })
}

fn classic(u: &mut Unstructured) -> ArbResult<ClassicHistogram> {
    let mut les = bounds(u)?;
    if u.arbitrary()? {
        les.push(f64::INFINITY);
    }
    // Cumulative counts: a running sum of non-negative increments, mostly.
    let mut running = 0.0;
    let mut buckets = Vec::with_capacity(les.len());
    for le in les {
        running += float_count(u)?;
        let count = if u.ratio(1, 16)? { float(u)? } else { running };
        buckets.push(CumulativeBucket { le, count });
    }
    // Buckets may come in any order.
    for i in (1..buckets.len()).rev() {
        let j = u.int_in_range(0..=i)?;
        buckets.swap(i, j);
    }
    Ok(ClassicHistogram {
        buckets,
        count: optional(u, float_count)?,
        sum: optional(u, float)?,
    })
}

/// Up to `ITEMS_MAX` spans: small offsets and lengths mostly, any `i32`/`u32` sometimes (so
/// the checks against huge span lengths are reached).
fn spans(u: &mut Unstructured) -> ArbResult<Vec<Span>> {
    let n = u.int_in_range(0..=6)?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let offset = match u.int_in_range(0u8..=15)? {
            0 => u.arbitrary()?,
            _ if i == 0 => u.int_in_range(-200..=200)?,
            _ => u.int_in_range(0..=8)?,
        };
        let length = match u.int_in_range(0u8..=31)? {
            0 => u.arbitrary()?,
            _ => u.int_in_range(0..=6)?,
        };
        out.push(Span { offset, length });
    }
    Ok(out)
}

/// The number of counts for some spans: their total length mostly, any small number sometimes.
fn spans_len(u: &mut Unstructured, spans: &[Span]) -> ArbResult<Option<usize>> {
    let total: u64 = spans.iter().map(|s| u64::from(s.length)).sum();
    Ok(match usize::try_from(total) {
        Ok(n) if n <= ITEMS_MAX && u.ratio(15, 16)? => Some(n),
        _ => None,
    })
}

fn deltas(u: &mut Unstructured, len: Option<usize>) -> ArbResult<Vec<i64>> {
    list(u, len, |u| {
        Ok(match u.int_in_range(0u8..=15)? {
            0 => u.arbitrary()?,
            1..=3 => u.int_in_range(-20..=0)?,
            _ => u.int_in_range(0..=1000)?,
        })
    })
}

/// A list of `len` items (`None`: up to `ITEMS_MAX`, as the bytes say).
fn list<T>(
    u: &mut Unstructured,
    len: Option<usize>,
    mut item: impl FnMut(&mut Unstructured) -> ArbResult<T>,
) -> ArbResult<Vec<T>> {
    let len = match len {
        Some(n) => n,
        None => u.int_in_range(0..=ITEMS_MAX)?,
    };
    (0..len).map(|_| item(u)).collect()
}

/// Up to `ITEMS_MAX` bounds: half the time neighbours as real bucket layouts have them (each
/// up to 3 times or 2 units above the last), else anywhere, strictly increasing mostly and in
/// any order sometimes. Neighbouring bounds keep most buckets a few bins wide, so the target
/// runs fast; far-apart ones reach the splits across many decades and llhist's range limits.
fn bounds(u: &mut Unstructured) -> ArbResult<Vec<f64>> {
    if u.arbitrary()? {
        let mut bound = float(u)?;
        return list(u, None, |u| {
            let here = bound;
            let step = f64::from(u.int_in_range(1u8..=16)?) / 8.0;
            bound += bound.abs().max(1.0) * step;
            Ok(here)
        });
    }
    let mut out = list(u, None, float)?;
    if u.ratio(7, 8)? {
        out.retain(|x| x.is_finite());
        out.sort_by(f64::total_cmp);
        out.dedup();
    }
    Ok(out)
}

fn offset(u: &mut Unstructured) -> ArbResult<i32> {
    if u.ratio(1, 16)? {
        u.arbitrary()
    } else {
        u.int_in_range(-300..=300)
    }
}

/// An integer count: small mostly, any `u64` sometimes (to reach the saturating paths).
fn count(u: &mut Unstructured) -> ArbResult<u64> {
    if u.ratio(1, 16)? {
        u.arbitrary()
    } else {
        u.int_in_range(0..=1000)
    }
}

fn small_count(u: &mut Unstructured) -> ArbResult<u64> {
    u.int_in_range(0..=1000)
}

/// An integer total for buckets: their sum plus a few uncounted samples mostly, anything
/// sometimes (so a total below the buckets is reached too).
fn total(u: &mut Unstructured, lists: &[&[u64]], zero: u64) -> ArbResult<u64> {
    if u.ratio(1, 8)? {
        return u.arbitrary();
    }
    let sum: u128 = lists
        .iter()
        .flat_map(|l| l.iter())
        .map(|&c| u128::from(c))
        .sum();
    let sum = sum + u128::from(zero) + u128::from(extra(u)?);
    Ok(u64::try_from(sum).unwrap_or(u64::MAX))
}

/// A few samples counted in a source's total but in no bucket.
fn extra(u: &mut Unstructured) -> ArbResult<u8> {
    u.int_in_range(0..=3)
}

/// The samples in the buckets that deltas describe (each bucket is the running sum).
fn delta_total(deltas: &[i64]) -> i128 {
    deltas
        .iter()
        .scan(0i128, |bucket, &d| {
            *bucket += i128::from(d);
            Some(*bucket)
        })
        .sum()
}

/// A float count: whole or fractional mostly, any float (negative, NaN, huge) sometimes.
fn float_count(u: &mut Unstructured) -> ArbResult<f64> {
    Ok(match u.int_in_range(0u8..=15)? {
        0 => float(u)?,
        1 => *u.choose(&[1e19, 1.8446744073709552e19, 1e300, f64::MAX, 0.5, 2.5])?,
        2..=5 => f64::from(u.int_in_range(0u16..=4000)?) / 16.0,
        _ => f64::from(u.int_in_range(0u16..=1000)?),
    })
}

fn optional<T>(
    u: &mut Unstructured,
    item: impl FnOnce(&mut Unstructured) -> ArbResult<T>,
) -> ArbResult<Option<T>> {
    Ok(if u.arbitrary()? { Some(item(u)?) } else { None })
}

/// A float from every region that matters: small multiples of 1/8, powers of two across the
/// whole range, bin edges, specials and llhist's limits, and any bit pattern.
fn float(u: &mut Unstructured) -> ArbResult<f64> {
    const SPECIAL: [f64; 14] = [
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
        5e-324,
        f64::MAX,
        f64::MIN,
        1e128,
        -1e128,
        1e-128,
        9.9e-129,
        1e127,
    ];
    Ok(match u.int_in_range(0u8..=7)? {
        0 => f64::from_bits(u.arbitrary()?),
        1 => *u.choose(&SPECIAL)?,
        2 | 3 => {
            let e = u.int_in_range(-1074..=1023)?;
            let sign = if u.arbitrary()? { -1.0 } else { 1.0 };
            sign * f64::from(e).exp2()
        }
        4 => {
            let val = f64::from(u.int_in_range(-99i8..=99)?);
            val * 10f64.powi(u.int_in_range(-130..=130)?)
        }
        _ => f64::from(u.int_in_range(-8000i16..=8000)?) / 8.0,
    })
}

// ---------------------------------------------------------------------------------------------
// Shared: what every histogram that came out of untrusted input must satisfy.

fn bins_of(h: &Histogram) -> Vec<(Bin, u64)> {
    h.bins().collect()
}

/// Invariants, then the histogram comes back unchanged from every form it can be written in,
/// and the queries a user can run on it answer without panicking.
pub fn check_histogram(h: &Histogram) {
    check_binary_forms(h);
    check_text_forms(h);
    exercise(h);
}

/// Invariants, and the histogram comes back unchanged from its binary and base64 forms.
fn check_binary_forms(h: &Histogram) {
    h.assert_invariants();

    let bytes = h.to_bytes();
    assert_eq!(bytes.len(), h.encoded_len(), "encoded_len");
    assert_eq!(
        Histogram::decode(&bytes).as_ref(),
        Ok(h),
        "binary round trip"
    );
    let b64 = h.to_base64();
    assert_eq!(
        model_base64(&b64).as_deref(),
        Some(&bytes[..]),
        "base64 form"
    );
    assert_eq!(
        Histogram::from_base64(&b64).as_ref(),
        Ok(h),
        "base64 round trip"
    );
}

/// The histogram comes back unchanged from both text forms and the JSON map.
fn check_text_forms(h: &Histogram) {
    let text = h.to_text();
    let reparsed = Histogram::from_text_entries(text.iter().map(String::as_str));
    assert_eq!(reparsed.as_ref(), Ok(h), "H[..] text round trip: {text:?}");
    let c_text = h.to_c_text();
    let reparsed = Histogram::from_text_entries(c_text.iter().map(String::as_str));
    assert_eq!(reparsed.as_ref(), Ok(h), "C text round trip: {c_text:?}");
    let json = h.to_json_map();
    assert_eq!(
        Histogram::from_json_map(&json).as_ref(),
        Ok(h),
        "JSON round trip: {json}"
    );
}

/// The read-only queries, and merging with itself: no panic, and the results that cannot be
/// wrong by rounding are checked.
fn exercise(h: &Histogram) {
    let total = h.bins().fold(0u64, |a, (_, c)| a.saturating_add(c));
    assert_eq!(h.sample_count(), total);
    assert_eq!(h.finite_count(), total.saturating_sub(h.nan_count()));
    let _ = (h.mean(), h.sum(), h.stddev());

    let qs = [0.0, 0.1, 0.5, 0.99, 1.0];
    for ty in [QuantileType::Type1, QuantileType::Type7] {
        let got = h.quantiles(&qs, ty).expect("sorted quantiles in [0, 1]");
        assert_eq!(got.len(), qs.len());
    }
    let thresholds = [
        f64::NEG_INFINITY,
        -1.0,
        0.0,
        1e-3,
        1.0,
        1e100,
        f64::INFINITY,
    ];
    let shares = h.inverse_quantiles(&thresholds).expect("sorted thresholds");
    assert!(
        shares
            .iter()
            .all(|s| s.is_nan() || (-1e-9..=1.0 + 1e-9).contains(s)),
        "{shares:?}"
    );
    for t in thresholds.into_iter().chain([f64::NAN, 0.15]) {
        let c = h.threshold_counts(t);
        assert!(c.below_exclusive <= c.below_inclusive, "{c:?}");
        assert!(c.above_exclusive <= c.above_inclusive, "{c:?}");
        let _ = h.count_nearby(t);
    }

    let mut doubled = h.clone();
    doubled.merge(h);
    doubled.assert_invariants();
    assert_eq!(doubled.sample_count(), total.saturating_mul(2));
    assert_eq!(Histogram::merge_many(&[h, h]), doubled);
    assert_eq!(doubled.bin_count(), h.bin_count());
}
