//! Aggregate chunks (kind 4): one numeric series' per-slice rollup, ten values per slice.
//!
//! Two layouts. **Predicted integers** (layout 2), whenever every value of the chunk is an
//! integer exact in an f64 (integer gauges and counters): the slice timestamps once, then per
//! slice each value as the Rice-coded difference from what the values before it predict — the
//! first from the previous slice's last, the last from the first, min and max from the nearer of
//! first and last, the sum from count × (min + max) / 2, Σ value² from sum² / count (the
//! residual count · Σx² − sum² is count² × the variance) — so a slice of a random walk costs a
//! few bytes, not ten values' worth. **Columns** (layout 1), for everything else: ten whole
//! numeric chunks (`numeric.rs`) at the same timestamps, floats XOR-coded.

use super::bits::{best_rice_k, get_varint, put_varint, unzigzag, zigzag, BitReader, BitWriter};
use super::decimal::INT_EXACT_MAX;
use super::{check_timestamps, read_count, timestamps};
use super::{frame_body, frame_finish, frame_start, numeric, ChunkKind, DecodeError, EncodeError};
use crate::aggregate::{NumericAggregate, SliceAggregate};

/// Columns, in order: count, sum, Σ value², min, max, first, last, first − slice start (ms),
/// last − slice start (ms), counter increase. Layout 1 starts with this count.
pub const AGGREGATE_COLUMNS: u8 = 10;
/// The first body byte of the predicted-integer layout.
pub const LAYOUT_PREDICTED_INTEGERS: u8 = 0x82;
/// Largest Rice parameter a layout-2 column may name.
const RICE_K_COLUMN_MAX: u32 = 62;

/// Encodes `(slice start, aggregate)` pairs, slice starts strictly increasing.
pub fn encode(slices: &[(i64, SliceAggregate)]) -> Result<Vec<u8>, EncodeError> {
    check_timestamps(slices.iter().map(|s| s.0))?;
    if let Some(rows) = integer_rows(slices) {
        if let Some(out) = encode_predicted(slices, &rows) {
            return Ok(out);
        }
    }
    encode_columns(slices)
}

/// Each slice's ten values as integers, if all of them are integers exact in an f64.
fn integer_rows(slices: &[(i64, SliceAggregate)]) -> Option<Vec<[i64; 10]>> {
    let limit = INT_EXACT_MAX as f64;
    slices
        .iter()
        .map(|(t, s)| {
            let mut row = [0i64; 10];
            for (c, slot) in row.iter_mut().enumerate() {
                let v = column_value(*t, s, c as u8);
                let ok = v.is_finite()
                    && v.trunc() == v
                    && v.abs() <= limit
                    && v.to_bits() != (-0.0f64).to_bits();
                if !ok {
                    return None;
                }
                *slot = v as i64;
            }
            Some(row)
        })
        .collect()
}

/// The state the predictions of the next slice start from.
#[derive(Clone, Copy, Default)]
struct Previous {
    row: [i64; 10],
    /// The previous slice's increase residual.
    increase_residual: i128,
}

/// The ten residuals of `row` after `prev` (in column order), each to be zigzag-coded; `None`
/// if one does not fit an i64.
fn residuals(row: &[i64; 10], prev: &Previous) -> Option<([i64; 10], i128)> {
    let [n, sum, sq, min, max, first, last, first_off, last_off, inc] = row.map(i128::from);
    let p = prev.row.map(i128::from);
    let increase_residual = inc - (last - first);
    let r: [i128; 10] = [
        n - p[0],
        2 * sum - n * (min + max),
        n * sq - sum * sum,
        first.min(last) - min,
        max - first.max(last),
        first - p[6],
        last - first,
        first_off - p[7],
        last_off - p[8],
        increase_residual - prev.increase_residual,
    ];
    let mut out = [0i64; 10];
    for (o, v) in out.iter_mut().zip(r) {
        *o = i64::try_from(v).ok()?;
    }
    Some((out, increase_residual))
}

/// Layout 2; `None` if a residual does not fit (then layout 1 is used).
fn encode_predicted(slices: &[(i64, SliceAggregate)], rows: &[[i64; 10]]) -> Option<Vec<u8>> {
    let mut prev = Previous::default();
    let mut coded: Vec<[u64; 10]> = Vec::with_capacity(rows.len());
    for row in rows {
        let (r, increase_residual) = residuals(row, &prev)?;
        coded.push(r.map(zigzag));
        prev = Previous {
            row: *row,
            increase_residual,
        };
    }
    let mut ks = [0u32; 10];
    for (c, k) in ks.iter_mut().enumerate() {
        let column: Vec<u64> = coded.iter().map(|r| r[c]).collect();
        *k = best_rice_k(&column, RICE_K_COLUMN_MAX).0;
    }
    let ts_ms: Vec<i64> = slices.iter().map(|s| s.0).collect();
    let mut out = frame_start(ChunkKind::Aggregate);
    out.push(LAYOUT_PREDICTED_INTEGERS);
    put_varint(&mut out, slices.len() as u64);
    let header = timestamps::write_header(&mut out, &ts_ms);
    out.extend(ks.iter().map(|&k| k as u8));
    let mut w = BitWriter::new();
    timestamps::write_bits(&mut w, &ts_ms, header);
    for r in &coded {
        for (&v, &k) in r.iter().zip(&ks) {
            w.write_rice(v, k);
        }
    }
    out.extend_from_slice(&w.finish());
    Some(frame_finish(out))
}

/// Layout 2's rows; errors name the bit where the input stops making sense.
fn decode_predicted(body: &[u8]) -> Result<Vec<(i64, [f64; 10])>, DecodeError> {
    let mut pos = 1;
    // Every slice costs at least one bit per column.
    let count = read_count(body, &mut pos, u64::from(AGGREGATE_COLUMNS))?;
    let header = timestamps::read_header(body, &mut pos, count)?;
    let ks_bytes = body.get(pos..pos + 10).ok_or(DecodeError::Truncated {
        bit_offset: body.len() as u64 * 8,
    })?;
    let mut ks = [0u32; 10];
    for (k, &b) in ks.iter_mut().zip(ks_bytes) {
        if u32::from(b) > RICE_K_COLUMN_MAX {
            return Err(invalid(pos, "Rice parameter out of range"));
        }
        *k = u32::from(b);
    }
    pos += 10;
    let mut r = BitReader::new(&body[pos..]);
    let ts_ms = timestamps::read_bits(&mut r, header, count)?;
    let mut prev = Previous::default();
    let mut out = Vec::with_capacity(count);
    let limit = i128::from(INT_EXACT_MAX);
    for t in ts_ms {
        let mut z = [0i128; 10];
        for (v, &k) in z.iter_mut().zip(&ks) {
            *v = i128::from(unzigzag(r.read_rice(k)?));
        }
        let p = prev.row.map(i128::from);
        let bad = |r: &BitReader<'_>| r.invalid("aggregate values not whole or beyond 2^53");
        // Each value is checked within ±2^53 before it is multiplied: no i128 overflow (the
        // previous row's values and every residual are below 2^64).
        let n = p[0] + z[0];
        let first = p[6] + z[5];
        let last = first + z[6];
        let min = first.min(last) - z[3];
        let max = first.max(last) + z[4];
        if [n, first, last, min, max].iter().any(|v| v.abs() > limit) || n < 1 {
            return Err(bad(&r));
        }
        // 2·sum = residual + n·(min + max), exactly even.
        let twice_sum = z[1] + n * (min + max);
        let sum = twice_sum / 2;
        if twice_sum % 2 != 0 || sum.abs() > limit {
            return Err(bad(&r));
        }
        // n·sq = residual + sum², exactly divisible.
        let n_sq = z[2] + sum * sum;
        let sq = n_sq / n;
        let increase_residual = prev.increase_residual + z[9];
        let inc = increase_residual + (last - first);
        let row128 = [
            n,
            sum,
            sq,
            min,
            max,
            first,
            last,
            p[7] + z[7],
            p[8] + z[8],
            inc,
        ];
        if n_sq % n != 0 || row128.iter().any(|v| v.abs() > limit) {
            return Err(bad(&r));
        }
        let row = row128.map(|v| v as i64);
        out.push((t, row.map(|v| v as f64)));
        prev = Previous {
            row,
            increase_residual,
        };
    }
    r.finish()?;
    Ok(out)
}

fn encode_columns(slices: &[(i64, SliceAggregate)]) -> Result<Vec<u8>, EncodeError> {
    let mut out = frame_start(ChunkKind::Aggregate);
    out.push(AGGREGATE_COLUMNS);
    for column in 0..AGGREGATE_COLUMNS {
        let values: Vec<(i64, f64)> = slices
            .iter()
            .map(|(t, s)| (*t, column_value(*t, s, column)))
            .collect();
        let bytes = numeric::encode(&values)?;
        put_varint(&mut out, bytes.len() as u64);
        out.extend_from_slice(&bytes);
    }
    Ok(frame_finish(out))
}

fn column_value(slice_start_ms: i64, s: &SliceAggregate, column: u8) -> f64 {
    let a = &s.agg;
    match column {
        0 => a.count as f64,
        1 => a.sum,
        2 => a.sum_squares,
        3 => a.min,
        4 => a.max,
        5 => a.first,
        6 => a.last,
        7 => a.first_ts_ms.wrapping_sub(slice_start_ms) as f64,
        8 => a.last_ts_ms.wrapping_sub(slice_start_ms) as f64,
        _ => s.increase,
    }
}

fn invalid(pos: usize, what: &'static str) -> DecodeError {
    DecodeError::Invalid {
        bit_offset: pos as u64 * 8,
        what,
    }
}

/// Decodes an aggregate chunk (either layout); never panics, allocation bounded by the input
/// length.
pub fn decode(bytes: &[u8]) -> Result<Vec<(i64, SliceAggregate)>, DecodeError> {
    let body = frame_body(bytes, ChunkKind::Aggregate)?;
    let rows = match body.first() {
        Some(&AGGREGATE_COLUMNS) => decode_columns(body)?,
        Some(&LAYOUT_PREDICTED_INTEGERS) => decode_predicted(body)?,
        _ => return Err(invalid(0, "layout (column count)")),
    };
    rows.into_iter()
        .map(|(t, v)| Ok((t, slice_of(t, &v)?)))
        .collect()
}

/// Layout 1's rows.
fn decode_columns(body: &[u8]) -> Result<Vec<(i64, [f64; 10])>, DecodeError> {
    let mut pos = 1;
    let mut columns: Vec<Vec<(i64, f64)>> = Vec::with_capacity(AGGREGATE_COLUMNS as usize);
    for _ in 0..AGGREGATE_COLUMNS {
        let len = get_varint(body, &mut pos)?;
        let end = (pos as u64)
            .checked_add(len)
            .filter(|&e| e <= body.len() as u64)
            .ok_or(DecodeError::Truncated {
                bit_offset: pos as u64 * 8,
            })? as usize;
        let column = numeric::decode(&body[pos..end])?;
        if columns
            .first()
            .is_some_and(|c: &Vec<(i64, f64)>| c.len() != column.len())
        {
            return Err(invalid(pos, "columns of different lengths"));
        }
        columns.push(column);
        pos = end;
    }
    if pos != body.len() {
        return Err(invalid(pos, "bytes after the last column"));
    }
    let mut out = Vec::with_capacity(columns[0].len());
    for i in 0..columns[0].len() {
        let t = columns[0][i].0;
        if columns.iter().any(|c| c[i].0 != t) {
            return Err(invalid(0, "columns at different timestamps"));
        }
        let mut row = [0.0; 10];
        for (slot, c) in row.iter_mut().zip(&columns) {
            *slot = c[i].1;
        }
        out.push((t, row));
    }
    Ok(out)
}

/// A slice's aggregate from its ten values, checked.
fn slice_of(t: i64, row: &[f64; 10]) -> Result<SliceAggregate, DecodeError> {
    let v = |c: usize| row[c];
    let count = v(0);
    let (first_off, last_off) = (v(7), v(8));
    let offsets_ok = (0.0..=i64::MAX as f64).contains(&first_off)
        && first_off <= last_off
        && last_off <= i64::MAX as f64
        && first_off.fract() == 0.0
        && last_off.fract() == 0.0;
    let count_ok = count >= 1.0 && count.fract() == 0.0 && count < u64::MAX as f64;
    if !(count_ok && offsets_ok) {
        return Err(invalid(0, "slice count or time offsets out of range"));
    }
    let agg = NumericAggregate {
        count: count as u64,
        sum: v(1),
        sum_squares: v(2),
        min: v(3),
        max: v(4),
        first: v(5),
        last: v(6),
        first_ts_ms: t.wrapping_add(first_off as i64),
        last_ts_ms: t.wrapping_add(last_off as i64),
    };
    Ok(SliceAggregate {
        agg,
        increase: v(9),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::repair_frame;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};

    /// The rollup slices of `samples` at `period_ms` (a naive model of the rollup build).
    fn slices_of(samples: &[(i64, f64)], period_ms: i64) -> Vec<(i64, SliceAggregate)> {
        let mut out: Vec<(i64, SliceAggregate)> = Vec::new();
        let mut rest = samples;
        while let Some(&(t0, _)) = rest.first() {
            let start = t0 - t0.rem_euclid(period_ms);
            let n = rest.partition_point(|p| p.0 < start + period_ms);
            let s = SliceAggregate::of_samples(&rest[..n]).unwrap();
            out.push((start, s));
            rest = &rest[n..];
        }
        out
    }

    fn bits_of(s: &SliceAggregate) -> [u64; 12] {
        let a = &s.agg;
        [
            a.count,
            a.sum.to_bits(),
            a.sum_squares.to_bits(),
            a.min.to_bits(),
            a.max.to_bits(),
            a.first.to_bits(),
            a.last.to_bits(),
            a.first_ts_ms as u64,
            a.last_ts_ms as u64,
            s.increase.to_bits(),
            0,
            0,
        ]
    }

    fn assert_round_trip(slices: &[(i64, SliceAggregate)]) -> Vec<u8> {
        let bytes = encode(slices).unwrap();
        let back = decode(&bytes).unwrap();
        assert_eq!(back.len(), slices.len());
        for ((t, a), (u, b)) in slices.iter().zip(&back) {
            assert_eq!(t, u);
            assert_eq!(bits_of(a), bits_of(b), "bit-exact at {t}");
        }
        bytes
    }

    fn walk(seed: u64, n: usize, integer: bool) -> Vec<(i64, f64)> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut v = 50.0f64;
        (0..n)
            .map(|i| {
                let step: f64 = StandardNormal.sample(&mut rng);
                v = (v + step).clamp(0.0, 100.0);
                (
                    1_700_000_000_000 + i as i64 * 10_000,
                    if integer { v.trunc() } else { v },
                )
            })
            .collect()
    }

    #[test]
    fn integer_walks_take_the_predicted_layout_and_floats_the_columns() {
        let ints = slices_of(&walk(1, 8640, true), 300_000);
        let bytes = assert_round_trip(&ints);
        assert_eq!(bytes[2], LAYOUT_PREDICTED_INTEGERS);
        let floats = slices_of(&walk(1, 8640, false), 300_000);
        let bytes = assert_round_trip(&floats);
        assert_eq!(bytes[2], AGGREGATE_COLUMNS);
    }

    #[test]
    fn bytes_per_slice_of_an_integer_walk() {
        // The rollup target: ≤ 2,000 B per stream-day at a level; a day is 288 slices of 5 min,
        // 1,440 of 1 min (block directory entries come on top).
        for (period_ms, budget_bytes) in [(300_000, 2_000.0 / 288.0), (60_000, 5.0)] {
            let slices = slices_of(&walk(7, 8640, true), period_ms);
            let layout1 = encode_columns(&slices).unwrap().len() as f64;
            let bytes = assert_round_trip(&slices).len() as f64;
            let per = bytes / slices.len() as f64;
            println!(
                "{} s slices: {per:.2} B per slice (columns layout: {:.2})",
                period_ms / 1000,
                layout1 / slices.len() as f64
            );
            assert!(per <= budget_bytes, "{per} B per slice");
            assert!(bytes < layout1);
        }
    }

    fn aggregate() -> impl Strategy<Value = SliceAggregate> {
        let value = prop_oneof![
            (-1000i64..1000).prop_map(|v| v as f64),
            any::<f64>(),
            Just(INT_EXACT_MAX as f64),
            Just(-(INT_EXACT_MAX as f64)),
        ];
        (
            1u64..1_000_000,
            [
                value.clone(),
                value.clone(),
                value.clone(),
                value.clone(),
                value.clone(),
            ],
            [value.clone(), value.clone(), value],
            (0i64..100_000, 0i64..100_000),
        )
            .prop_map(
                |(count, [sum, sq, min, max, first], [last, inc, _], (a, b))| SliceAggregate {
                    agg: NumericAggregate {
                        count,
                        sum,
                        sum_squares: sq,
                        min,
                        max,
                        first,
                        last,
                        first_ts_ms: a.min(b),
                        last_ts_ms: a.max(b),
                    },
                    increase: inc,
                },
            )
    }

    proptest! {
        #[test]
        fn arbitrary_aggregates_round_trip(
            items in proptest::collection::vec(aggregate(), 1..12),
            integer in any::<bool>(),
        ) {
            // Slices 100 s apart; offsets inside them.
            let slices: Vec<(i64, SliceAggregate)> = items
                .into_iter()
                .enumerate()
                .map(|(i, mut s)| {
                    let t = i as i64 * 100_000;
                    s.agg.first_ts_ms += t;
                    s.agg.last_ts_ms += t;
                    if integer {
                        let a = &mut s.agg;
                        for v in [&mut a.sum, &mut a.sum_squares, &mut a.min, &mut a.max,
                                  &mut a.first, &mut a.last, &mut s.increase] {
                            *v = if v.is_finite() { v.trunc() % 1e15 } else { 1.0 };
                        }
                    }
                    (t, s)
                })
                .collect();
            assert_round_trip(&slices);
        }

        #[test]
        fn decode_arbitrary_bytes_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..120),
            layout in prop_oneof![Just(AGGREGATE_COLUMNS), Just(LAYOUT_PREDICTED_INTEGERS)],
        ) {
            // Version and kind (repaired), the layout byte, the rest, 4 checksum bytes.
            let mut framed = vec![0, 0, layout];
            framed.extend_from_slice(&bytes);
            framed.extend_from_slice(&[0; 4]);
            let _ = decode(&repair_frame(framed, ChunkKind::Aggregate));
        }

        #[test]
        fn decode_mutated_chunk_never_panics(seed in 0u64..1000, flip in any::<usize>(), bit in 0u8..8) {
            let slices = slices_of(&walk(seed, 200, true), 60_000);
            let mut bytes = encode(&slices).unwrap();
            let at = flip % (bytes.len() - 4);
            bytes[at] ^= 1 << bit;
            let _ = decode(&repair_frame(bytes, ChunkKind::Aggregate));
        }
    }
}
