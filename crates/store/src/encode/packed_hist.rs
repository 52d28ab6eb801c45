//! Packed histogram chunks (kind 5): each period's bins packed (`hist::packed`, ≈ 2 bytes per
//! bin), no entropy coder. Rollups use them.
//!
//! Why a second histogram chunk: rollup chunks hold a few slices each (so a short read decodes
//! only what it needs), and a read of the last hours of a thousand series decodes thousands of
//! them, where a windowed chunk's setup per chunk (its window, each bin's parameter) is paid
//! for four slices. A packed chunk decodes with one varint walk per bin into the caller's
//! accumulators, at about twice the bytes of a windowed one.

use hist::{Accumulator, Histogram, BIN_COUNT_MAX};

use super::bits::{get_varint, put_varint};
use super::histogram::{read_period_starts, start_chunk, ChunkSummary, HIST_CHUNK_PERIODS_MAX};
use super::{frame_body, frame_finish};
use super::{ChunkKind, DecodeError, EncodeError};
use hist::packed;

/// Encodes one chunk of per-period histograms. Period starts must strictly increase.
pub fn encode(periods: &[(i64, Histogram)]) -> Result<Vec<u8>, EncodeError> {
    let mut out = start_chunk(ChunkKind::PackedHistogram, periods)?;
    for (_, h) in periods {
        put_varint(&mut out, h.bin_count() as u64);
        packed::pack_histogram(h, &mut out);
    }
    Ok(frame_finish(out))
}

/// Decodes one chunk; never panics; bounded by `HIST_CHUNK_PERIODS_MAX` and the chunk's bytes
/// whatever the input.
pub fn decode(bytes: &[u8]) -> Result<Vec<(i64, Histogram)>, DecodeError> {
    let mut out = Vec::new();
    decode_with(bytes, |ts, keys, counts| {
        out.push((ts, Histogram::from_sorted_keys(keys, counts)));
    })?;
    Ok(out)
}

/// Decodes one chunk straight into accumulators, as `rice_hist::decode_into` does (bins added
/// as they are read, eight at a time where they pack one byte each: no buffers between).
pub fn decode_into(
    bytes: &[u8],
    mut slot_of: impl FnMut(i64) -> Option<usize>,
    out: &mut [Accumulator],
) -> Result<ChunkSummary, DecodeError> {
    walk_chunk(bytes, |ts, bins, bins_count| {
        match slot_of(ts).and_then(|i| out.get_mut(i)) {
            Some(acc) => packed::add_prefix_to(bins, bins_count, acc),
            None => packed::for_each_bin_prefix(bins, bins_count, |_, _| {}),
        }
    })
}

fn decode_with(
    bytes: &[u8],
    mut period: impl FnMut(i64, &[u16], &[u64]),
) -> Result<ChunkSummary, DecodeError> {
    let (mut keys, mut counts) = (Vec::new(), Vec::new());
    walk_chunk(bytes, |ts, bins, bins_count| {
        keys.clear();
        counts.clear();
        let used = packed::unpack_prefix_into(bins, bins_count, &mut keys, &mut counts)?;
        period(ts, &keys, &counts);
        Ok(used)
    })
}

/// The chunk walker: checks the frame and timestamps, then calls `period(start, bytes from its
/// bins on, bin count)` for each period in time order, which returns the bytes its bins took.
fn walk_chunk(
    bytes: &[u8],
    mut period: impl FnMut(i64, &[u8], usize) -> Result<usize, packed::UnpackError>,
) -> Result<ChunkSummary, DecodeError> {
    let body = frame_body(bytes, ChunkKind::PackedHistogram)?;
    let mut pos = 0;
    // Every period takes at least one byte (its bin count).
    let count_max = (HIST_CHUNK_PERIODS_MAX as u64).min(body.len() as u64);
    let ts_ms = read_period_starts(body, &mut pos, count_max)?;
    let count = ts_ms.len();
    // Bounded: one step per period, each reading at least one byte.
    for &ts in &ts_ms {
        let bins = get_varint(body, &mut pos)?;
        if bins > BIN_COUNT_MAX as u64 {
            return Err(DecodeError::Invalid {
                bit_offset: pos as u64 * 8,
                what: "more bins than exist",
            });
        }
        let used = period(ts, &body[pos..], bins as usize).map_err(|e| DecodeError::Invalid {
            bit_offset: (pos + e.offset) as u64 * 8,
            what: e.what,
        })?;
        pos += used;
    }
    if pos != body.len() {
        return Err(DecodeError::Invalid {
            bit_offset: pos as u64 * 8,
            what: "bytes after the last period",
        });
    }
    Ok(ChunkSummary {
        periods: count,
        first_ts_ms: ts_ms.first().copied().unwrap_or(0),
        last_ts_ms: ts_ms.last().copied().unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    proptest::proptest! {
        #[test]
        fn round_trip(periods in proptest::collection::vec(
            (0i64..1_000, proptest::collection::vec((-1e9f64..1e9, 1u64..u64::MAX / 2), 0..80)),
            1..40,
        )) {
            let mut t = -5_000i64;
            let periods: Vec<(i64, Histogram)> = periods
                .into_iter()
                .map(|(gap, values)| {
                    t += gap + 1;
                    let mut h = Histogram::new();
                    for (v, n) in values {
                        h.insert_n(v, n);
                    }
                    (t, h)
                })
                .collect();
            let bytes = encode(&periods).unwrap();
            proptest::prop_assert_eq!(decode(&bytes).unwrap(), periods.clone());
            let mut acc = vec![Accumulator::new(); 1];
            let summary = decode_into(&bytes, |_| Some(0), &mut acc).unwrap();
            proptest::prop_assert_eq!(summary.periods, periods.len());
            let mut all = Histogram::new();
            for (_, h) in &periods {
                all.merge(h);
            }
            proptest::prop_assert_eq!(acc[0].to_histogram(), all);
            // Periods mapped to no accumulator are skipped, the others land where mapped.
            let mut acc = vec![Accumulator::new(); 2];
            decode_into(&bytes, |t| (t % 3 != 0).then_some((t % 2) as usize), &mut acc).unwrap();
            for (slot, acc) in acc.iter().enumerate() {
                let mut want = Histogram::new();
                for (t, h) in &periods {
                    if t % 3 != 0 && (t % 2) as usize == slot {
                        want.merge(h);
                    }
                }
                proptest::prop_assert_eq!(acc.to_histogram(), want);
            }
        }

        #[test]
        fn damaged_chunks_are_errors_not_panics(
            cut in 0usize..400,
            flip in 0usize..4000,
        ) {
            let mut h = Histogram::new();
            for i in 0..60 {
                h.insert_n(1e-3 * f64::from(i + 1), u64::from(i as u32 % 7 + 1));
            }
            let periods: Vec<(i64, Histogram)> = (0..5).map(|i| (i * 60_000, h.clone())).collect();
            let bytes = encode(&periods).unwrap();
            let cut = cut.min(bytes.len());
            proptest::prop_assert!(decode(&bytes[..cut]).is_err());
            let mut flipped = bytes.clone();
            let bit = flip % (flipped.len() * 8);
            flipped[bit / 8] ^= 1 << (bit % 8);
            proptest::prop_assert!(decode(&flipped).is_err(), "the checksum catches a flip");
        }
    }

    #[test]
    fn a_chunk_of_another_kind_is_not_read_as_packed() {
        let mut h = Histogram::new();
        h.insert(1.0);
        let bytes = encode(&[(0, h)]).unwrap();
        let bytes = crate::encode::repair_frame(bytes, ChunkKind::RiceHistogram);
        assert!(matches!(
            decode(&bytes),
            Err(DecodeError::Kind { kind: 6, .. })
        ));
    }
}
