//! Numeric chunks: (ms timestamp, f64) samples of one series, strictly increasing in time.
//!
//! Values take one of two modes per chunk: when every value is an integer of magnitude ≤ 2^53
//! (and none is −0.0) the zigzag deltas are Rice-coded with the best parameter for the chunk
//! (an integer random walk costs about 2 bits a sample); otherwise Gorilla XOR coding, which is
//! exact on every bit pattern (NaN payloads, ±inf, −0.0).

use super::bits::{best_rice_k, get_varint, put_varint, unzigzag, zigzag, BitReader, BitWriter};
use super::timestamps;
use super::{check_timestamps, frame_body, frame_finish, frame_start, read_count};
use super::{ChunkKind, DecodeError, EncodeError};

/// Values are Gorilla XOR codes.
pub const VALUE_MODE_XOR: u8 = 0;
/// Values are integers: Rice-coded zigzag deltas.
pub const VALUE_MODE_INT: u8 = 1;
/// Integers of at most this magnitude are exact in an f64.
pub const INT_EXACT_MAX: i64 = 1 << 53;
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
    match integers(samples) {
        Some(ints) => write_ints(&mut out, &mut w, &ints),
        None => write_xor(&mut out, &mut w, samples),
    }
    out.extend_from_slice(&w.finish());
    Ok(frame_finish(out))
}

/// The values as integers, if every one is an integer exactly representable both ways.
fn integers(samples: &[(i64, f64)]) -> Option<Vec<i64>> {
    let limit = INT_EXACT_MAX as f64;
    samples
        .iter()
        .map(|&(_, v)| {
            let ok = v.is_finite()
                && v.trunc() == v
                && v.abs() <= limit
                && v.to_bits() != (-0.0f64).to_bits();
            ok.then_some(v as i64)
        })
        .collect()
}

fn write_ints(out: &mut Vec<u8>, w: &mut BitWriter, ints: &[i64]) {
    let deltas: Vec<u64> = ints
        .windows(2)
        .map(|p| zigzag(p[1].wrapping_sub(p[0])))
        .collect();
    let (k, _) = best_rice_k(&deltas, 63);
    out.push(VALUE_MODE_INT);
    out.push(k as u8);
    put_varint(out, zigzag(ints[0]));
    for &d in &deltas {
        w.write_rice(d, k);
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
        VALUE_MODE_INT => read_ints(body, &mut pos, count, header)?,
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

fn read_ints(
    body: &[u8],
    pos: &mut usize,
    count: usize,
    header: timestamps::TsHeader,
) -> Result<Vec<(i64, f64)>, DecodeError> {
    let k = u32::from(*body.get(*pos).ok_or(DecodeError::Truncated {
        bit_offset: *pos as u64 * 8,
    })?);
    *pos += 1;
    let mut value = unzigzag(get_varint(body, pos)?);
    let mut r = BitReader::new(&body[*pos..]);
    if let Some(delta) = timestamps::regular_interval(header, count) {
        // Regular timestamps (the usual case) computed as the values are read: no timestamp
        // vector written and read back.
        let mut out = Vec::with_capacity(count);
        let mut ts = header.first_ts_ms;
        let mut exact = value.unsigned_abs() <= INT_EXACT_MAX as u64;
        out.push((ts, value as f64));
        r.read_rice_run(k, count - 1, |d| {
            value = value.wrapping_add(unzigzag(d));
            ts += delta;
            exact &= value.unsigned_abs() <= INT_EXACT_MAX as u64;
            out.push((ts, value as f64));
        })?;
        if !exact {
            return Err(r.invalid("integer value beyond 2^53"));
        }
        r.finish()?;
        return Ok(out);
    }
    let ts_ms = timestamps::read_bits(&mut r, header, count)?;
    let mut out = Vec::with_capacity(count);
    for (i, &ts) in ts_ms.iter().enumerate() {
        if i > 0 {
            value = value.wrapping_add(unzigzag(r.read_rice(k)?));
        }
        if value.unsigned_abs() > INT_EXACT_MAX as u64 {
            return Err(r.invalid("integer value beyond 2^53"));
        }
        out.push((ts, value as f64));
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
    fn integer_mode_only_for_exact_integers() {
        let ints = encode(&[(0, 1.0), (1, 2.0), (2, -3.0)]).unwrap();
        // version, kind, count, first ts, ts mode, delta, then the value mode.
        assert_eq!(ints[6], VALUE_MODE_INT);
        let neg_zero = encode(&[(0, 1.0), (1, -0.0)]).unwrap();
        assert_eq!(neg_zero[6], VALUE_MODE_XOR);
        let big = encode(&[(0, (INT_EXACT_MAX as f64) * 2.0)]).unwrap();
        // One sample: no ts mode or delta.
        assert_eq!(big[4], VALUE_MODE_XOR);
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
            Just(f64::NAN),
            Just(-0.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
        ]
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
