//! Millisecond timestamps of a chunk: the first as a zigzag varint, then either one constant
//! interval (regular series: zero bits per sample) or delta-of-delta codes in the bit stream.

use super::bits::{get_varint, put_varint, unzigzag, zigzag, BitReader, BitWriter};
use super::DecodeError;

/// Every interval is the same: `ts[i] = first + i·delta`.
pub const TS_MODE_REGULAR: u8 = 0;
/// Intervals vary: delta-of-delta codes in the bit stream.
pub const TS_MODE_DOD: u8 = 1;

/// Delta-of-delta buckets: prefix bits, prefix length, payload bits (two's complement).
const DOD_BUCKETS: [(u64, u32, u32); 3] = [(0b10, 2, 7), (0b110, 3, 12), (0b1110, 4, 20)];
const DOD_RAW_PREFIX: (u64, u32) = (0b1111, 4);

/// The header fields, known before the bit stream is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsHeader {
    pub first_ts_ms: i64,
    pub mode: u8,
    /// The first interval (`ts[1] − ts[0]`, wrapping), 0 when there is one sample.
    pub delta_ms: u64,
}

/// Writes the header for strictly increasing `ts_ms` (checked by the caller) and returns it.
pub fn write_header(out: &mut Vec<u8>, ts_ms: &[i64]) -> TsHeader {
    assert!(!ts_ms.is_empty());
    assert!(
        ts_ms.windows(2).all(|w| w[0] < w[1]),
        "timestamps strictly increasing"
    );
    put_varint(out, zigzag(ts_ms[0]));
    let mut header = TsHeader {
        first_ts_ms: ts_ms[0],
        mode: TS_MODE_REGULAR,
        delta_ms: 0,
    };
    if ts_ms.len() == 1 {
        return header;
    }
    header.delta_ms = interval(ts_ms[0], ts_ms[1]);
    let regular = ts_ms
        .windows(2)
        .all(|w| interval(w[0], w[1]) == header.delta_ms);
    header.mode = if regular {
        TS_MODE_REGULAR
    } else {
        TS_MODE_DOD
    };
    out.push(header.mode);
    put_varint(out, header.delta_ms);
    header
}

fn interval(a: i64, b: i64) -> u64 {
    (b as u64).wrapping_sub(a as u64)
}

/// Writes the delta-of-delta codes of samples 2.. (nothing in regular mode).
pub fn write_bits(w: &mut BitWriter, ts_ms: &[i64], header: TsHeader) {
    if header.mode != TS_MODE_DOD {
        return;
    }
    let mut prev_delta = header.delta_ms;
    for pair in ts_ms.windows(2).skip(1) {
        let delta = interval(pair[0], pair[1]);
        write_dod(w, delta.wrapping_sub(prev_delta) as i64);
        prev_delta = delta;
    }
}

fn write_dod(w: &mut BitWriter, dod: i64) {
    if dod == 0 {
        w.write_bit(false);
        return;
    }
    for (prefix, prefix_bits, bits) in DOD_BUCKETS {
        let half = 1i64 << (bits - 1);
        if (-half..half).contains(&dod) {
            w.write(prefix, prefix_bits);
            w.write(dod as u64 & ((1u64 << bits) - 1), bits);
            return;
        }
    }
    w.write(DOD_RAW_PREFIX.0, DOD_RAW_PREFIX.1);
    w.write(dod as u64, 64);
}

pub fn read_header(body: &[u8], pos: &mut usize, count: usize) -> Result<TsHeader, DecodeError> {
    let first_ts_ms = unzigzag(get_varint(body, pos)?);
    let mut header = TsHeader {
        first_ts_ms,
        mode: TS_MODE_REGULAR,
        delta_ms: 0,
    };
    if count == 1 {
        return Ok(header);
    }
    let mode_offset = *pos;
    header.mode = *body.get(*pos).ok_or(DecodeError::Truncated {
        bit_offset: *pos as u64 * 8,
    })?;
    *pos += 1;
    if header.mode != TS_MODE_REGULAR && header.mode != TS_MODE_DOD {
        return Err(DecodeError::Invalid {
            bit_offset: mode_offset as u64 * 8,
            what: "timestamp mode",
        });
    }
    header.delta_ms = get_varint(body, pos)?;
    Ok(header)
}

/// The interval of a regular header whose `count` timestamps `read_bits` would accept (a
/// positive interval, the last timestamp within i64), so that a caller can compute them as
/// `first + i · interval` itself; `None` for a delta-of-delta header or one `read_bits` rejects.
pub fn regular_interval(header: TsHeader, count: usize) -> Option<i64> {
    if header.mode != TS_MODE_REGULAR || count < 2 {
        return None;
    }
    let delta = i64::try_from(header.delta_ms).ok().filter(|&d| d > 0)?;
    let last = i128::from(header.first_ts_ms) + (count as i128 - 1) * i128::from(delta);
    (last <= i128::from(i64::MAX)).then_some(delta)
}

/// Reads `count` timestamps; rejects any that do not strictly increase.
pub fn read_bits(
    r: &mut BitReader<'_>,
    header: TsHeader,
    count: usize,
) -> Result<Vec<i64>, DecodeError> {
    let mut out = Vec::with_capacity(count);
    out.push(header.first_ts_ms);
    let mut delta = header.delta_ms;
    for i in 1..count {
        if i >= 2 && header.mode == TS_MODE_DOD {
            delta = delta.wrapping_add(read_dod(r)? as u64);
        }
        let prev = out[i - 1];
        let ts = (prev as u64).wrapping_add(delta) as i64;
        if ts <= prev || delta == 0 {
            return Err(r.invalid("timestamps not strictly increasing"));
        }
        out.push(ts);
    }
    Ok(out)
}

fn read_dod(r: &mut BitReader<'_>) -> Result<i64, DecodeError> {
    // The prefix is unary: 0 → zero, 1..=3 ones → a bucket, 4 ones → 64 raw bits.
    let ones = r.read_unary(4)? as usize;
    match ones {
        0 => Ok(0),
        1..=3 => {
            let bits = DOD_BUCKETS[ones - 1].2;
            let raw = r.read(bits)?;
            // Sign-extend the two's complement payload.
            let shift = 64 - bits;
            Ok(((raw << shift) as i64) >> shift)
        }
        _ => Ok(r.read(64)? as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(ts: &[i64]) -> Vec<i64> {
        let mut head = Vec::new();
        let header = write_header(&mut head, ts);
        let mut w = BitWriter::new();
        write_bits(&mut w, ts, header);
        let bits = w.finish();
        let mut pos = 0;
        let back = read_header(&head, &mut pos, ts.len()).unwrap();
        assert_eq!(back, header);
        assert_eq!(pos, head.len());
        let mut r = BitReader::new(&bits);
        let out = read_bits(&mut r, back, ts.len()).unwrap();
        r.finish().unwrap();
        out
    }

    #[test]
    fn regular_series_cost_no_bits() {
        let ts: Vec<i64> = (0..1440).map(|i| 1_700_000_000_000 + i * 10_000).collect();
        let mut head = Vec::new();
        let header = write_header(&mut head, &ts);
        assert_eq!(header.mode, TS_MODE_REGULAR);
        let mut w = BitWriter::new();
        write_bits(&mut w, &ts, header);
        assert_eq!(w.bit_len(), 0);
        assert_eq!(round_trip(&ts), ts);
    }

    #[test]
    fn extremes_round_trip() {
        let ts = [i64::MIN, -1, 0, 1, 63, 64, 100_000, i64::MAX - 1, i64::MAX];
        assert_eq!(round_trip(&ts), ts);
    }

    proptest! {
        #[test]
        fn arbitrary_increasing_round_trip(mut ts in proptest::collection::vec(any::<i64>(), 1..64), jitter in proptest::collection::vec(-3000i64..3000, 1..64)) {
            ts.sort_unstable();
            ts.dedup();
            let mut regular: Vec<i64> = (0..jitter.len() as i64).map(|i| i * 10_000).collect();
            for (t, j) in regular.iter_mut().zip(&jitter) { *t += j; }
            regular.sort_unstable();
            regular.dedup();
            prop_assert_eq!(round_trip(&ts), ts);
            prop_assert_eq!(round_trip(&regular), regular);
        }

        #[test]
        fn regular_headers_read_as_the_per_timestamp_rule_says(
            first in prop_oneof![any::<i64>(), Just(i64::MAX - 5), Just(i64::MIN)],
            delta in prop_oneof![any::<u64>(), 0u64..4, Just(i64::MAX as u64), Just(1u64 << 63)],
            count in 1usize..8,
        ) {
            // Model: each timestamp the one before plus the interval (wrapping), rejected unless
            // strictly greater with a non-zero interval.
            let mut model = vec![first];
            let mut ok = true;
            for _ in 1..count {
                let prev = model[model.len() - 1];
                let ts = (prev as u64).wrapping_add(delta) as i64;
                if ts <= prev || delta == 0 {
                    ok = false;
                    break;
                }
                model.push(ts);
            }
            let header = TsHeader { first_ts_ms: first, mode: TS_MODE_REGULAR, delta_ms: delta };
            let got = read_bits(&mut BitReader::new(&[]), header, count);
            prop_assert_eq!(got.is_ok(), ok);
            if let Ok(got) = got {
                prop_assert_eq!(&got, &model);
            }
            // The shortcut numeric chunks take agrees wherever it applies.
            if let Some(d) = regular_interval(header, count) {
                let computed: Vec<i64> = (0..count as i64)
                    .map(|i| (i128::from(first) + i128::from(i) * i128::from(d)) as i64)
                    .collect();
                prop_assert!(ok);
                prop_assert_eq!(computed, model);
            }
        }
    }
}
