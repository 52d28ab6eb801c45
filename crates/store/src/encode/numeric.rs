//! Numeric chunks: (ms timestamp, f64) samples of one series, strictly increasing in time.
//!
//! Values take one of two modes per chunk: when every value is a short decimal — `m / 10^d`
//! exactly, `|m| ≤ 2^53`, the same `d ≤ 15` for the chunk (`decimal.rs`; integers are `d = 0`)
//! — the mantissas' steps (a gauge) or steps of steps (a counter at a steady rate), whichever
//! is smaller, are Rice-coded with a parameter that follows the recent steps (an integer random
//! walk costs about 2 bits a sample, a gauge with noise in its second decimal a byte);
//! otherwise Gorilla XOR coding, which is exact on every bit pattern (NaN payloads, ±inf,
//! −0.0).

use super::bits::{best_rice_k, get_varint, put_varint, rice_bits, unzigzag, zigzag};
use super::bits::{BitReader, BitWriter};
use super::decimal::{self, AdaptiveK, ADAPTIVE_K_MAX, DECIMALS_MAX, INT_EXACT_MAX};
use super::timestamps;
use super::{check_timestamps, frame_body, frame_finish, frame_start, read_count};
use super::{ChunkKind, DecodeError, EncodeError};

/// Values are Gorilla XOR codes.
pub const VALUE_MODE_XOR: u8 = 0;
/// Values are decimals: adaptive-Rice-coded mantissa steps.
pub const VALUE_MODE_DECIMAL: u8 = 1;
/// Decimal predictors: the previous mantissa, or the previous plus the previous step.
pub const PREDICT_DELTA: u8 = 0;
pub const PREDICT_DELTA_OF_DELTA: u8 = 1;
/// Flag beside the predictor: the Rice parameter stays `k₀` for the whole chunk (a walk whose
/// steps keep one spread codes about 8 % shorter with the best fixed parameter than with one
/// that follows the last few steps).
pub const FIXED_K: u8 = 2;
/// Residuals the starting Rice parameter is fit to.
const K0_FIT_RESIDUALS: usize = 16;
/// The XOR code's leading-zero field is 5 bits.
const XOR_LEADING_MAX: u32 = 31;

/// Encodes one chunk. Timestamps must strictly increase; values are stored bit-exactly.
pub fn encode(samples: &[(i64, f64)]) -> Result<Vec<u8>, EncodeError> {
    let count = check_timestamps(samples.iter().map(|s| s.0))?;
    let ts_ms: Vec<i64> = samples.iter().map(|s| s.0).collect();
    let mut out = frame_start(ChunkKind::Numeric);
    put_varint(&mut out, count as u64);
    let header = timestamps::write_header(&mut out, &ts_ms);
    let mut w = BitWriter::new();
    timestamps::write_bits(&mut w, &ts_ms, header);
    match decimals(samples) {
        Some((d, mantissas)) => write_decimal(&mut out, &mut w, d, &mantissas),
        None => write_xor(&mut out, &mut w, samples),
    }
    out.extend_from_slice(&w.finish());
    Ok(frame_finish(out))
}

/// The fewest decimals that write every value exactly, and the mantissas, if there are.
fn decimals(samples: &[(i64, f64)]) -> Option<(u8, Vec<i64>)> {
    let mut d = 0;
    for &(_, v) in samples {
        d = decimal::decimals_of(v, d)?.0;
    }
    let mantissas = samples
        .iter()
        .map(|&(_, v)| decimal::mantissa(v, d))
        .collect::<Option<Vec<i64>>>()?;
    Some((d, mantissas))
}

/// The zigzag residuals of `m[1..]` under a predictor.
fn residuals(m: &[i64], predictor: u8) -> Vec<u64> {
    let mut out = Vec::with_capacity(m.len().saturating_sub(1));
    let mut step = 0i64;
    for (i, pair) in m.windows(2).enumerate() {
        let d = pair[1].wrapping_sub(pair[0]);
        let r = if predictor == PREDICT_DELTA_OF_DELTA && i > 0 {
            d.wrapping_sub(step)
        } else {
            d
        };
        step = d;
        out.push(zigzag(r));
    }
    out
}

/// The starting parameter, fit to the first residuals, and the bits of all of them.
fn adaptive_cost(residuals: &[u64]) -> (u32, u64) {
    let head = &residuals[..residuals.len().min(K0_FIT_RESIDUALS)];
    let (k0, _) = best_rice_k(head, ADAPTIVE_K_MAX);
    let mut k = AdaptiveK::starting_at(k0);
    let bits = residuals
        .iter()
        .map(|&r| {
            let b = rice_bits(r, k.k());
            k.update(r);
            b
        })
        .sum();
    (k0, bits)
}

fn write_decimal(out: &mut Vec<u8>, w: &mut BitWriter, d: u8, mantissas: &[i64]) {
    // Each predictor with an adaptive and with a fixed parameter: the shortest wins.
    let mut best: Option<(u64, u8, u32, Vec<u64>)> = None;
    for p in [PREDICT_DELTA, PREDICT_DELTA_OF_DELTA] {
        let r = residuals(mantissas, p);
        let (k0, adaptive_bits) = adaptive_cost(&r);
        let (k_fixed, fixed_bits) = best_rice_k(&r, ADAPTIVE_K_MAX);
        let (bits, flags, k0) = if fixed_bits < adaptive_bits {
            (fixed_bits, p | FIXED_K, k_fixed)
        } else {
            (adaptive_bits, p, k0)
        };
        match &best {
            Some(b) if b.0 <= bits => {}
            _ => best = Some((bits, flags, k0, r)),
        }
    }
    let Some((_, flags, k0, residuals)) = best else {
        return;
    };
    out.push(VALUE_MODE_DECIMAL);
    out.push(d);
    out.push(flags);
    out.push(k0 as u8);
    put_varint(out, zigzag(mantissas[0]));
    if flags & FIXED_K != 0 {
        for &r in &residuals {
            w.write_rice(r, k0);
        }
        return;
    }
    let mut k = AdaptiveK::starting_at(k0);
    for &r in &residuals {
        w.write_rice(r, k.k());
        k.update(r);
    }
}

fn write_xor(out: &mut Vec<u8>, w: &mut BitWriter, samples: &[(i64, f64)]) {
    out.push(VALUE_MODE_XOR);
    out.extend_from_slice(&samples[0].1.to_bits().to_le_bytes());
    let mut prev = samples[0].1.to_bits();
    // The (leading, trailing) zero window of the last explicit XOR code.
    let mut window: Option<(u32, u32)> = None;
    for &(_, v) in &samples[1..] {
        let bits = v.to_bits();
        let x = bits ^ prev;
        prev = bits;
        if x == 0 {
            w.write_bit(false);
            continue;
        }
        let lead = x.leading_zeros().min(XOR_LEADING_MAX);
        let trail = x.trailing_zeros();
        match window {
            Some((wl, wt)) if lead >= wl && trail >= wt => {
                w.write(0b10, 2);
                w.write(x >> wt, 64 - wl - wt);
            }
            _ => {
                let len = 64 - lead - trail;
                w.write(0b11, 2);
                w.write(u64::from(lead), 5);
                w.write(u64::from(len - 1), 6);
                w.write(x >> trail, len);
                window = Some((lead, trail));
            }
        }
    }
}

/// Decodes one chunk; never panics, allocation bounded by the input length.
pub fn decode(bytes: &[u8]) -> Result<Vec<(i64, f64)>, DecodeError> {
    let body = frame_body(bytes, ChunkKind::Numeric)?;
    let mut pos = 0;
    // Every value after the first costs at least one bit.
    let count = read_count(body, &mut pos, 1)?;
    let header = timestamps::read_header(body, &mut pos, count)?;
    let mode_offset = pos;
    let mode = *body.get(pos).ok_or(DecodeError::Truncated {
        bit_offset: pos as u64 * 8,
    })?;
    pos += 1;
    let values = match mode {
        VALUE_MODE_DECIMAL => read_decimal(body, &mut pos, count, header)?,
        VALUE_MODE_XOR => read_xor(body, &mut pos, count, header)?,
        _ => {
            return Err(DecodeError::Invalid {
                bit_offset: mode_offset as u64 * 8,
                what: "value mode",
            })
        }
    };
    debug_assert_eq!(values.len(), count);
    debug_assert!(values.windows(2).all(|p| p[0].0 < p[1].0));
    Ok(values)
}

/// The decimal header's bytes: decimals, predictor, starting Rice parameter.
fn read_decimal_header(body: &[u8], pos: &mut usize) -> Result<(u8, u8, u32), DecodeError> {
    let at = *pos;
    let bytes = body.get(at..at + 3).ok_or(DecodeError::Truncated {
        bit_offset: at as u64 * 8,
    })?;
    let (d, predictor, k0) = (bytes[0], bytes[1], u32::from(bytes[2]));
    let bad = |what| DecodeError::Invalid {
        bit_offset: at as u64 * 8,
        what,
    };
    if d > DECIMALS_MAX {
        return Err(bad("more than 15 decimals"));
    }
    if predictor > (PREDICT_DELTA_OF_DELTA | FIXED_K) {
        return Err(bad("decimal predictor"));
    }
    if k0 > ADAPTIVE_K_MAX {
        return Err(bad("Rice parameter above 54"));
    }
    *pos += 3;
    Ok((d, predictor, k0))
}

fn read_decimal(
    body: &[u8],
    pos: &mut usize,
    count: usize,
    header: timestamps::TsHeader,
) -> Result<Vec<(i64, f64)>, DecodeError> {
    let (d, flags, k0) = read_decimal_header(body, pos)?;
    let (predictor, fixed) = (flags & PREDICT_DELTA_OF_DELTA, flags & FIXED_K != 0);
    let mut m = unzigzag(get_varint(body, pos)?);
    let mut r = BitReader::new(&body[*pos..]);
    let ts_ms = match timestamps::regular_interval(header, count) {
        // Regular timestamps (the usual case) computed as the values are read.
        Some(_) => None,
        None => Some(timestamps::read_bits(&mut r, header, count)?),
    };
    let delta = timestamps::regular_interval(header, count).unwrap_or(0);
    let ts_of = |i: usize| match &ts_ms {
        Some(ts) => ts[i],
        None => header.first_ts_ms + i as i64 * delta,
    };
    let mut out = Vec::with_capacity(count);
    let mut exact = m.unsigned_abs() <= INT_EXACT_MAX as u64;
    out.push((ts_of(0), decimal::value_of(m, d)));
    let (mut k, mut step) = (AdaptiveK::starting_at(k0), 0i64);
    for i in 1..count {
        let residual = if fixed {
            r.read_rice(k0)?
        } else {
            let residual = r.read_rice(k.k())?;
            k.update(residual);
            residual
        };
        let mut s = unzigzag(residual);
        if predictor == PREDICT_DELTA_OF_DELTA && i > 1 {
            s = s.wrapping_add(step);
        }
        step = s;
        m = m.wrapping_add(s);
        exact &= m.unsigned_abs() <= INT_EXACT_MAX as u64;
        out.push((ts_of(i), decimal::value_of(m, d)));
    }
    if !exact {
        return Err(r.invalid("mantissa beyond 2^53"));
    }
    r.finish()?;
    Ok(out)
}

fn read_xor(
    body: &[u8],
    pos: &mut usize,
    count: usize,
    header: timestamps::TsHeader,
) -> Result<Vec<(i64, f64)>, DecodeError> {
    let first = body.get(*pos..*pos + 8).ok_or(DecodeError::Truncated {
        bit_offset: *pos as u64 * 8,
    })?;
    let mut prev = u64::from_le_bytes([
        first[0], first[1], first[2], first[3], first[4], first[5], first[6], first[7],
    ]);
    *pos += 8;
    let mut r = BitReader::new(&body[*pos..]);
    let ts_ms = timestamps::read_bits(&mut r, header, count)?;
    let mut out = Vec::with_capacity(count);
    out.push((ts_ms[0], f64::from_bits(prev)));
    let mut window: Option<(u32, u32)> = None;
    for &ts in &ts_ms[1..] {
        prev ^= read_xor_code(&mut r, &mut window)?;
        out.push((ts, f64::from_bits(prev)));
    }
    r.finish()?;
    Ok(out)
}

fn read_xor_code(
    r: &mut BitReader<'_>,
    window: &mut Option<(u32, u32)>,
) -> Result<u64, DecodeError> {
    if !r.read_bit()? {
        return Ok(0);
    }
    if !r.read_bit()? {
        let (lead, trail) = window.ok_or_else(|| r.invalid("XOR window reused before set"))?;
        return Ok(r.read(64 - lead - trail)? << trail);
    }
    let lead = r.read(5)? as u32;
    let len = r.read(6)? as u32 + 1;
    if lead + len > 64 {
        return Err(r.invalid("XOR window wider than 64 bits"));
    }
    let trail = 64 - lead - len;
    *window = Some((lead, trail));
    Ok(r.read(len)? << trail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::repair_frame;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    fn assert_round_trip(samples: &[(i64, f64)]) -> Vec<u8> {
        let bytes = encode(samples).unwrap();
        let back = decode(&bytes).unwrap();
        assert_eq!(back.len(), samples.len());
        for (a, b) in samples.iter().zip(&back) {
            assert_eq!(a.0, b.0);
            assert_eq!(a.1.to_bits(), b.1.to_bits(), "{} vs {}", a.1, b.1);
        }
        bytes
    }

    #[test]
    fn special_values_round_trip() {
        let nan_payload = f64::from_bits(0x7ff8_dead_beef_0001);
        let values = [
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            nan_payload,
            1e308,
            -5e-324,
            1.5,
        ];
        let samples: Vec<(i64, f64)> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as i64 * 7, v))
            .collect();
        assert_round_trip(&samples);
        assert_round_trip(&[(5, -0.0)]);
        assert_round_trip(&[(i64::MIN, 3.0), (i64::MAX, -(INT_EXACT_MAX as f64))]);
    }

    #[test]
    fn decimal_mode_only_for_exact_decimals() {
        let ints = encode(&[(0, 1.0), (1, 2.0), (2, -3.0)]).unwrap();
        // version, kind, count, first ts, ts mode, delta, then the value mode and decimals.
        assert_eq!(ints[6..8], [VALUE_MODE_DECIMAL, 0]);
        let cents = encode(&[(0, 1.25), (1, 2.5), (2, -3.0)]).unwrap();
        assert_eq!(cents[6..8], [VALUE_MODE_DECIMAL, 2]);
        let neg_zero = encode(&[(0, 1.0), (1, -0.0)]).unwrap();
        assert_eq!(neg_zero[6], VALUE_MODE_XOR);
        let noise = encode(&[(0, 1.0), (1, 0.1 + 0.2)]).unwrap();
        assert_eq!(noise[6], VALUE_MODE_XOR);
        let big = encode(&[(0, (INT_EXACT_MAX as f64) * 2.0)]).unwrap();
        // One sample: no ts mode or delta.
        assert_eq!(big[4], VALUE_MODE_XOR);
        // A counter at a steady rate takes steps of steps.
        let counter: Vec<(i64, f64)> = (0..100).map(|i| (i, (i * 1000 + i % 3) as f64)).collect();
        assert_eq!(
            encode(&counter).unwrap()[8] & PREDICT_DELTA_OF_DELTA,
            PREDICT_DELTA_OF_DELTA
        );
        // Steps of one spread keep one parameter; quiet then loud steps let it follow.
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut v = 0i64;
        // 100 samples, as the counter above: the same header layout.
        let even: Vec<(i64, f64)> = (0..100)
            .map(|i| {
                v += rng.random_range(-5i64..=5);
                (i, v as f64)
            })
            .collect();
        let bytes = assert_round_trip(&even);
        assert_eq!(bytes[8] & FIXED_K, FIXED_K);
        let bursty: Vec<(i64, f64)> = (0..100)
            .map(|i| {
                let spread = if i < 50 { 1 } else { 100_000 };
                v += (i * 7919 % 11 - 5) * spread;
                (i, v as f64)
            })
            .collect();
        let bytes = assert_round_trip(&bursty);
        assert_eq!(bytes[8] & FIXED_K, 0);
    }

    #[test]
    fn encode_rejects_bad_input() {
        assert_eq!(encode(&[]), Err(EncodeError::Empty));
        assert_eq!(
            encode(&[(5, 1.0), (5, 2.0)]),
            Err(EncodeError::NotIncreasing {
                index: 1,
                ts_ms: 5,
                prev_ts_ms: 5
            })
        );
    }

    #[test]
    fn corruption_is_detected() {
        let mut bytes = encode(&[(0, 1.0), (10, 2.0)]).unwrap();
        bytes[3] ^= 1;
        assert!(matches!(decode(&bytes), Err(DecodeError::Checksum { .. })));
        assert!(matches!(
            decode(&bytes[..3]),
            Err(DecodeError::TooShort { .. })
        ));
    }

    /// Integer random walk 0–100 (step −1, 0 or +1, clamped) at 10 s: the shape the
    /// bytes-per-sample target is set on.
    /// 4-hour chunks (1,440 samples). Prints and bounds bytes per sample for the encoder alone.
    #[test]
    fn bytes_per_sample_integer_walk() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (series, per_chunk) = (20, 1440);
        let (mut total_bytes, mut wide_bytes, mut tsbs_bytes) = (0, 0, 0);
        for _ in 0..series {
            let (mut v, mut v_wide) = (rng.random_range(0..=100i64), 50i64);
            // TSBS cpu-only: a float walk with N(0, 1) steps clamped to 0–100, sent as integers.
            let mut v_tsbs = rng.random_range(0.0..100.0f64);
            let (mut samples, mut wide, mut tsbs) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..per_chunk as i64 {
                let ts_ms = 1_700_000_000_000 + i * 10_000;
                v = (v + rng.random_range(-1..=1)).clamp(0, 100);
                v_wide = (v_wide + rng.random_range(-5..=5)).clamp(0, 100);
                let step: f64 = rng.sample(rand_distr::StandardNormal);
                v_tsbs = (v_tsbs + step).clamp(0.0, 100.0);
                samples.push((ts_ms, v as f64));
                wide.push((ts_ms, v_wide as f64));
                tsbs.push((ts_ms, v_tsbs.trunc()));
            }
            total_bytes += assert_round_trip(&samples).len();
            wide_bytes += assert_round_trip(&wide).len();
            tsbs_bytes += assert_round_trip(&tsbs).len();
        }
        let per = |bytes: usize| bytes as f64 / (series * per_chunk) as f64;
        let (per_sample, wide_per_sample, tsbs_per_sample) =
            (per(total_bytes), per(wide_bytes), per(tsbs_bytes));
        println!(
            "integer walk ±1: {per_sample:.3} B/sample; ±5: {wide_per_sample:.3}; \
             TSBS-like N(0,1) truncated: {tsbs_per_sample:.3}"
        );
        assert!(per_sample <= 0.30, "{per_sample}");
        assert!(tsbs_per_sample <= 0.35, "{tsbs_per_sample}");
        assert!(wide_per_sample <= 0.55, "{wide_per_sample}");
    }

    /// Float gauge random walk (TSBS-like, normal steps, full f64 precision): reported, and
    /// bounded only loosely since XOR coding of full-precision noise cannot go far below 8 B.
    #[test]
    fn bytes_per_sample_float_walk() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        let per_chunk = 1440;
        let mut v = 50.0f64;
        let samples: Vec<(i64, f64)> = (0..per_chunk as i64)
            .map(|i| {
                v = (v + rng.sample::<f64, _>(rand_distr::StandardNormal)).clamp(0.0, 100.0);
                (i * 10_000, v)
            })
            .collect();
        let per_sample = assert_round_trip(&samples).len() as f64 / per_chunk as f64;
        println!("float walk: {per_sample:.3} B/sample");
        assert!(per_sample <= 8.5, "{per_sample}");
    }

    fn value() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<u64>().prop_map(f64::from_bits),
            (-1000i64..1000).prop_map(|v| v as f64),
            (-100_000i64..100_000, 0u8..6).prop_map(|(m, d)| decimal::value_of(m, d)),
            Just(f64::NAN),
            Just(-0.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
        ]
    }

    /// A gauge with noise in its second decimal, every 10 s, 2-hour chunks.
    #[test]
    fn bytes_per_sample_decimal_gauge() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let mut v = 5_000i64;
        let samples: Vec<(i64, f64)> = (0..720)
            .map(|i| {
                let noise: f64 = rng.sample(rand_distr::StandardNormal);
                v = (v + (noise * 30.0) as i64).clamp(0, 10_000);
                (1_700_000_000_000 + i * 10_000, v as f64 / 100.0)
            })
            .collect();
        let per_sample = assert_round_trip(&samples).len() as f64 / samples.len() as f64;
        println!("decimal gauge, σ = 0.3: {per_sample:.3} B/sample");
        assert!(per_sample <= 1.0, "{per_sample}");
    }

    proptest! {
        #[test]
        fn arbitrary_samples_round_trip(
            ts in proptest::collection::btree_set(any::<i64>(), 1..80),
            values in proptest::collection::vec(value(), 80),
            ints in proptest::collection::vec(-(INT_EXACT_MAX)..=INT_EXACT_MAX, 80),
        ) {
            let samples: Vec<(i64, f64)> = ts.iter().zip(&values).map(|(&t, &v)| (t, v)).collect();
            assert_round_trip(&samples);
            let samples: Vec<(i64, f64)> = ts.iter().zip(&ints).map(|(&t, &v)| (t, v as f64)).collect();
            assert_round_trip(&samples);
        }

        #[test]
        fn decode_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
            if let Ok(samples) = decode(&repair_frame(bytes, ChunkKind::Numeric)) {
                prop_assert!(samples.windows(2).all(|p| p[0].0 < p[1].0));
            }
        }

        #[test]
        fn decode_mutated_chunk_never_panics(flip in 0usize..400, bit in 0u8..8, ints in any::<bool>()) {
            let samples: Vec<(i64, f64)> = (0..40).map(|i| (i * 1000 + i % 3, if ints { i as f64 } else { (i as f64).sin() })).collect();
            let mut bytes = encode(&samples).unwrap();
            let at = flip % (bytes.len() - 4);
            bytes[at] ^= 1 << bit;
            let _ = decode(&repair_frame(bytes, ChunkKind::Numeric));
        }
    }
}
